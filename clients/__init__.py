"""The client library for the brokers, apart from the brokers as Kafka keeps ``clients/``:
the producer, the consumer, the console tools, and what the brokers share with them (the
record batch format, ``records``; the error codes, ``errors``). It depends on nothing in
``brokerd``, ``metadata`` or ``raft`` (tests/test_layering.py)."""
from .cluster_view import BrokerResponseError, ClientError, KafkaTimeoutError
from .consumer import Consumer
from .producer import ACKS, ConfigException, Producer, RecordMetadata, RecordTooLargeError, producer_config
from .records import ConsumerRecord, ProducerRecord
from .serialization import RecordDeserializationError, SerializationError

__all__ = ["Producer", "Consumer", "RecordMetadata", "ConsumerRecord", "ProducerRecord", "ClientError",
           "KafkaTimeoutError", "BrokerResponseError", "RecordTooLargeError", "ConfigException",
           "SerializationError", "RecordDeserializationError", "ACKS", "producer_config"]
