"""PostgreSQL: logical replication with the built-in ``pgoutput`` plugin (psycopg2's replication
connection), one concern per module: ``pgoutput`` decodes the stream's messages, ``values`` turns
their text values into typed ones."""
