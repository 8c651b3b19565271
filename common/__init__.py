"""The ground floor: what every other package builds on, and which imports none of them.

- ``errors``: Kafka's error codes (``ErrorCode``) and ``KafkaError``, the one exception that
  carries one (a code, a one-line message, Kafka's retriable flag), raised by the controller's
  rules, the brokers and the clients alike.
- ``config_def``: ``ConfigError`` (any wrong setting: a server's, a tool's, a client's) and
  Kafka's ConfigDef (one typed, validated, documented entry per key); ``server_keys`` is the
  table of the servers' keys, ``config_docs`` prints it as the settings table of
  docs/operations.md.
- ``properties``: reading Java properties files.
- ``tls``: TLS settings (``TLSConfig``) and the gRPC credentials built from them; ``channels``:
  dialling a gRPC channel with them.
- ``host_ports``: ``HOST:PORT`` and lists of them.
- ``metrics``: a process's Prometheus registry and ``/metrics`` endpoint.

Only the standard library and grpcio are needed, so the embeddable Raft library (``raft/``,
the base install: grpcio and protobuf) imports the floor instead of keeping its own TLS and
properties code: TLS settings have one home, here. ``common.metrics`` alone needs
prometheus-client (a server dependency); nothing in the floor imports it, only the servers do.
"""
