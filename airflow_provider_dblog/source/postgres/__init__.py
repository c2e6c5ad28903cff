"""PostgreSQL, one concern per module: ``connection`` (psycopg2, session settings), ``schema`` (catalog:
tables, columns, keys), ``sql`` (quoting, key ranges as row comparisons), ``splitter`` (chunk boundaries),
``reader`` (a chunk's COPY into Arrow), ``watermarks`` (a chunk's transaction and its WAL locations),
``keys`` (PostgreSQL's key order), ``dialect`` (the ``DataSourceDialect``); for the logical-replication
stream (not wired yet) ``pgoutput`` decodes the built-in plugin's messages and ``values`` turns text values
into typed ones (and gives every type its Arrow type)."""
