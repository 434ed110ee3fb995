"""The Streamlit what-if explorer: a thin view over the engines, models and catalog.

Start it with ``quiclab app`` (or ``make app``). Layout, after Streamlit's own
``demo-self-driving``: ``streamlit_app.py`` is the script Streamlit runs and
calls :func:`quiclab.app.main.main`; each page is a module with ``*_ui()``
functions that only return parameters and ``show_*`` functions that draw;
everything computed comes from the library through the cached calls in
:mod:`quiclab.app.resources`.

Modules: ``config`` (where models, catalog and reports are), ``urlstate``
(the scenario in the URL), ``measured`` (catalog rows matching a scenario),
``charts`` (Altair figures), ``widgets`` (the scenario sidebar), and one page
module each: ``whatif``, ``sweep``, ``reproductions``, ``explore`` (the Data page).
"""
