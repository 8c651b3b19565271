"""The Kafka-protocol front end of the broker: a listener that speaks Kafka's wire protocol and
calls the same partition, producer-state, group and admin code as the gRPC service."""
