"""MySQL / MariaDB: pymysql for control queries, connectorx for chunk SELECTs (Arrow), python-mysql-replication
(+ a compiled row decoder) for the binlog."""
