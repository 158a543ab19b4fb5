-- The outbox is a queue: every row is inserted once and deleted soon after. With the
-- default autovacuum thresholds (20 % of the table) dead rows pile up between vacuums
-- and every claim scans them; measured in make bench, the end-to-end latency after a
-- 60,000-operation drain was four times that before it. Vacuum it after every 1,000
-- dead rows instead.
ALTER TABLE outbox SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
