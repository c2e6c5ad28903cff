-- Run once by the mysql image on first start (/docker-entrypoint-initdb.d).
-- The server's CDC settings are on its command line in docker-compose.yaml.

-- The CDC user: read the tables, read the binlog (dump), ask for positions and binlog files.
-- A development password: the same one is in AIRFLOW_CONN_DBLOG_SOURCE; change both together.
CREATE USER 'dblog'@'%' IDENTIFIED BY 'dblog-dev-password';
GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'dblog'@'%';

-- DBLog's watermark table (watermark strategy watermark_table): one row, updated with a fresh UUID
-- before and after each chunk SELECT. dblog runs CREATE TABLE IF NOT EXISTS and INSERT IGNORE on it
-- first, hence CREATE and INSERT besides UPDATE.
CREATE DATABASE IF NOT EXISTS dblog;
CREATE TABLE dblog._dblog_watermark (id TINYINT PRIMARY KEY, mark VARCHAR(64) NOT NULL) ENGINE=InnoDB;
INSERT INTO dblog._dblog_watermark VALUES (1, '');
GRANT CREATE, INSERT, UPDATE ON dblog._dblog_watermark TO 'dblog'@'%';

-- A sample table for the example DAGs (DBLOG_TABLES=shop.orders).
CREATE DATABASE IF NOT EXISTS shop;
CREATE TABLE shop.orders (
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    customer_id INT NOT NULL,
    status VARCHAR(16) NOT NULL,
    amount DECIMAL(12, 2) NOT NULL,
    note TEXT,
    created_at DATETIME(6) NOT NULL,
    KEY (customer_id)
) ENGINE=InnoDB;
SET SESSION cte_max_recursion_depth = 100000;
INSERT INTO shop.orders
WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 50000)
SELECT n, 1 + n % 997, ELT(1 + n % 4, 'new', 'paid', 'shipped', 'late'), ROUND(n * 1.37 % 5000, 2),
       IF(n % 10 = 0, NULL, CONCAT('order ', n)), TIMESTAMP('2024-01-01') + INTERVAL n MINUTE
FROM seq;
