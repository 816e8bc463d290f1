"""Downloading URLs: the download session (``download_session``), its ``http.client``
connection pool (``connection_pool``) and the network guard every connection goes through
(``netguard``). Knows nothing of sources or units."""
