"""quiclab subpackage."""
