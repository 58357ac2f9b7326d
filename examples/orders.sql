-- A Kafka topic of orders, keyed by order id, where some values are not valid JSON.
CREATE CONNECTION kafka TO KAFKA (BROKER 'localhost:9092');

CREATE SOURCE orders
  FROM KAFKA CONNECTION kafka (TOPIC 'orders')
  KEY FORMAT TEXT VALUE FORMAT JSON
  INCLUDE PARTITION, OFFSET
  ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE AS decode_error)
  WITH (REDIRECT ERRORS = orders_dlq, TIMELINE = 'orders');

-- Good rows, per customer; bad ones stay visible in the error column and the DLQ.
CREATE MATERIALIZED VIEW revenue AS
  SELECT data->>'customer' AS customer, sum((data->>'amount')::numeric) AS total
  FROM orders
  WHERE decode_error IS NULL
  GROUP BY 1;

SELECT key, decode_error FROM orders WHERE decode_error IS NOT NULL;
SELECT count(*) FROM orders_dlq;
SHOW COLUMNS FROM orders;
