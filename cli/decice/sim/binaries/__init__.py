"""The sim control plane's binaries: where each comes from (``resolve``: an explicit
directory, the cache, a pinned download, the offline build), the offline recipe
(``build``, with ``aptsrc`` and ``tools``) and checksum-verified downloads
(``download``)."""
