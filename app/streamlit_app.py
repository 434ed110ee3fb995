"""The script Streamlit runs (``streamlit run app/streamlit_app.py -- --models DIR …``).

``quiclab app`` starts it with the resolved locations as script arguments;
run any other way (``AppTest``, ``streamlit run`` by hand) it reads the same
environment variables as the CLI.
"""

import sys
from pathlib import Path

from quiclab.app.main import main

if __name__ == "__main__":
    # Streamlit sets sys.argv to [this script, *script arguments]; under AppTest
    # sys.argv belongs to the test runner, so only our own arguments are read.
    is_script = Path(sys.argv[0]).resolve() == Path(__file__).resolve()
    main(sys.argv[1:] if is_script else [])
