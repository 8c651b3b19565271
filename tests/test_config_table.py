"""The servers' configuration table (common/server_keys.py, Kafka's ConfigDef; issue 26 item 3):
docs/operations.md's table of keys is the table printed, every key the servers read is declared
in it (reading an undeclared one raises), and a bad value of any declared key is one line
naming the key, at start and from ``kraft configs`` alike."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from common.config_def import ConfigError, ConfigKey, in_range
from common.config_docs import START, between_markers, table, with_table
from common.errors import ErrorCode, KafkaError
from common.server_keys import SERVER_KEYS
from kraft.cli.invocation import parse_configs
from metadata.config import from_properties
from metadata.configs import END as TOPIC_END
from metadata.configs import START as TOPIC_START
from metadata.configs import (BROKER_CONFIGS, TOPIC_TABLE, ConfigSource, broker_config_synonyms, topic_config_synonyms,
                              topic_table, validate)
from metadata.image import MetadataImage, ResourceType
from metadata.records import MetadataRecord, config
from metadata.topics import ConfigOp, ConfigOpType, alter_configs, describe_configs

REPO = Path(__file__).resolve().parent.parent
#: The modules that turn a properties file into the servers' settings.
READERS = ["metadata/config.py", "metadata/server.py", "brokerd/config.py", "brokerd/server.py"]
TYPED_READS = {"int", "bool", "str", "float", "list", "value"}


def _props(**extra: str) -> dict[str, str]:
    props = {"node.id": "1", "process.roles": "broker,controller",
             "controller.quorum.voters": "1@127.0.0.1:9093",
             "listeners": "CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
             "log.dirs": "/tmp/kraft-config-table"}
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return props


def test_the_docs_table_is_the_table_printed():
    docs = (REPO / "docs/operations.md").read_text()
    assert START in docs
    assert with_table(docs) == docs, ("docs/operations.md's table of keys differs from common/server_keys.py: "
                                      "run python -m common.config_docs --write docs/operations.md")


def test_the_table_prints_from_the_command_line():
    p = subprocess.run([sys.executable, "-m", "common.config_docs"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout == table()
    assert "| `replica.lag.time.max.ms` | broker | 30000 | yes |" in p.stdout


def test_every_key_the_servers_read_is_declared():
    """Every ``cfg.int("key")``-style read in the readers names a declared key of its type, and
    none reads the properties around the table (``cfg.props.get``)."""
    wrong = []
    for name in READERS:
        tree = ast.parse((REPO / name).read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            target = ast.unparse(node.func.value)
            if node.func.attr == "get" and target.endswith(("cfg.props", "self.props")):
                wrong.append(f"{name}:{node.lineno} reads {ast.unparse(node)} around the table")
            if target in ("cfg", "self") and node.func.attr in TYPED_READS and node.args \
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                key = node.args[0].value
                if key not in SERVER_KEYS:
                    wrong.append(f"{name}:{node.lineno} reads {key}, which the table lacks")
    assert not wrong, "\n".join(wrong)


def test_reading_an_undeclared_key_raises():
    cfg = from_properties(_props())
    with pytest.raises(KeyError, match="no.such.key is not a declared configuration key"):
        cfg.value("no.such.key")
    with pytest.raises(TypeError):
        cfg.bool("num.partitions")  # an int, not a boolean


def test_typed_reads_give_values_and_defaults():
    cfg = from_properties(_props(**{"num.partitions": "6", "log.cleanup.policy": "delete,compact",
                                    "compression.type": "uncompressed"}))
    assert cfg.int("num.partitions") == 6
    assert cfg.int("broker.session.timeout.ms") == 9000  # the default
    assert cfg.bool("auto.create.topics.enable") is True
    assert cfg.float("log.cleaner.min.cleanable.ratio") == 0.5
    assert cfg.value("log.cleanup.policy") == "compact,delete"  # a list, normalized to one spelling
    assert cfg.str("compression.type") == "none"
    assert cfg.list("kafka.listener.names") == ("KAFKA",)
    assert cfg.value("controller.quorum.heartbeat.interval.ms") is None  # computed by its reader


@pytest.mark.parametrize("key,value,problem", [
    ("broker.session.timeout.ms", "soon", "value 'soon' is not an integer"),  # a controller key on a combined node
    ("replica.fetch.max.bytes", "0", "value 0 must be at least 1"),
    ("num.partitions", "3000000000", "value 3000000000 must be between 1 and 2147483647"),
    ("auto.create.topics.enable", "maybe", "value 'maybe' must be true or false"),
    ("log.cleanup.policy", "shred", "value 'shred' must be one of delete, compact"),
    ("log.cleaner.min.cleanable.ratio", "2", "value 2.0 must be between 0 and 1"),
    ("auto.leader.rebalance.enable", "yes", "value 'yes' must be true or false"),
])
def test_a_bad_value_is_one_line_naming_the_key(key: str, value: str, problem: str):
    with pytest.raises(ConfigError) as e:
        from_properties(_props(**{key: value}), "server.properties")
    message = str(e.value)
    assert message.startswith(f"server.properties: Invalid value {value} for configuration {key}: {problem}")
    assert "\n" not in message


def test_kraft_configs_checks_the_dynamic_keys_by_the_same_rules():
    assert BROKER_CONFIGS == SERVER_KEYS.dynamic()
    assert {"log.retention.ms", "min.insync.replicas", "replica.lag.time.max.ms"} <= set(BROKER_CONFIGS)
    with pytest.raises(KafkaError) as e:
        validate("broker", "log.cleanup.policy", "shred")
    assert e.value.code == ErrorCode.INVALID_CONFIG
    assert "Invalid value shred for configuration log.cleanup.policy" in e.value.message
    with pytest.raises(KafkaError, match="Unknown broker config name: node.id"):
        validate("broker", "node.id", "3")  # a static key: not settable while the cluster runs
    validate("broker", "log.retention.ms", "-1")


def test_a_dynamic_key_without_a_default_is_deleted_and_described(monkeypatch: pytest.MonkeyPatch):
    """A dynamic key may have no default (Kafka's ssl.keystore.location has none): deleting it
    checks only its name, and describing it answers no value (Kafka's null). Found by mypy: the
    delete validated the default as a value, and the rule then failed on None."""
    key = ConfigKey("test.quota.bytes", "int", None, "a dynamic key without a default", in_range(0), dynamic=True)
    monkeypatch.setitem(BROKER_CONFIGS, key.name, key)
    image = MetadataImage.empty("cluster")
    assert alter_configs(image, ResourceType.BROKER, "", [ConfigOp(key.name, ConfigOpType.DELETE)]) == [
        config(ResourceType.BROKER, "", key.name, None)]
    assert (key.name, None, True) in describe_configs(image, ResourceType.BROKER, "")
    with pytest.raises(KafkaError, match="Invalid value -1 for configuration test.quota.bytes"):
        alter_configs(image, ResourceType.BROKER, "", [ConfigOp(key.name, value="-1")])


def test_a_server_with_a_bad_value_says_so_in_one_line(tmp_path: Path):
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nprocess.roles=controller\ncontroller.quorum.voters=1@127.0.0.1:19999\n"
                     f"listeners=CONTROLLER://127.0.0.1:19999\nmetadata.log.dir={tmp_path / 'meta'}\n"
                     f"controller.quorum.election.timeout.ms=5\n")
    p = subprocess.run([sys.executable, "-m", "kraft.cli", "server-start", str(props)], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert lines == [f"Error: {props}: Invalid value 5 for configuration controller.quorum.election.timeout.ms: "
                     f"value 5 must be at least 20"], p.stderr


#: Kafka's TopicConfig names (3.8, with KIP-390's compression levels), the specification.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy", "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.storage.enable", "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes",
    "segment.jitter.ms", "segment.ms", "unclean.leader.election.enable"}


def test_every_kafka_topic_config_is_declared_with_a_good_default_and_a_use():
    assert set(TOPIC_TABLE) == KAFKA_TOPIC_CONFIGS
    for name, t in TOPIC_TABLE.items():
        assert t.key.default is not None and t.key.problem(t.key.default) is None, name
        assert t.use, f"{name}: say what this cluster does with it"
        assert t.synonym is None or SERVER_KEYS[t.synonym].problem(t.key.default) is None, name
    validate("topic", "message.timestamp.type", "LogAppendTime")
    with pytest.raises(KafkaError, match="Invalid value 0 for configuration compression.gzip.level"):
        validate("topic", "compression.gzip.level", "0")
    with pytest.raises(KafkaError, match=r"Invalid value 9223372036854775808 for configuration flush.ms"):
        validate("topic", "flush.ms", str(2**63))


def test_the_topic_config_table_in_the_docs_is_the_table_printed():
    docs = (REPO / "docs/operations.md").read_text()
    assert between_markers(docs, TOPIC_START, TOPIC_END, topic_table()) == docs, (
        "docs/operations.md's topic configs differ from metadata/configs.py: "
        "run python -m metadata.configs --write docs/operations.md")
    p = subprocess.run([sys.executable, "-m", "metadata.configs"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, topic_table())


def test_append_and_subtract_change_list_keys_item_by_item():
    """IncrementalAlterConfigs' APPEND and SUBTRACT (issue 27) start from the current value, or
    the default, and only list-typed keys take them (Kafka's INVALID_CONFIG otherwise); the
    tools take a list value in brackets, as kafka-configs.sh does."""
    image = MetadataImage.empty("cluster")
    B, APPEND, SUBTRACT = ResourceType.BROKER, ConfigOpType.APPEND, ConfigOpType.SUBTRACT

    def policy(*ops: tuple[ConfigOpType, str]) -> list[MetadataRecord]:
        return alter_configs(image, B, "", [ConfigOp("log.cleanup.policy", o, v) for o, v in ops])

    def values(*expected: str) -> list[MetadataRecord]:
        return [config(B, "", "log.cleanup.policy", v) for v in expected]
    assert policy((APPEND, "compact")) == values("delete,compact")
    assert policy((APPEND, "compact,delete"), (SUBTRACT, "delete"), (SUBTRACT, "nothing")) == values(
        "delete,compact", "compact", "compact")
    with pytest.raises(KafkaError, match=r"^INVALID_CONFIG: Invalid value  for configuration log.cleanup.policy"):
        policy((SUBTRACT, "delete"))
    with pytest.raises(KafkaError) as e:
        alter_configs(image, B, "", [ConfigOp("log.retention.ms", APPEND, "1")])
    assert (e.value.code, e.value.message) == (
        ErrorCode.INVALID_CONFIG, "Can't APPEND to key log.retention.ms because its type is not LIST.")
    with pytest.raises(KafkaError) as e:
        alter_configs(image, B, "", [ConfigOp("log.retention.ms", 7, "1")])
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert parse_configs(("cleanup.policy=[compact,delete],retention.ms=1", "flush.ms=2")) == {
        "cleanup.policy": "compact,delete", "retention.ms": "1", "flush.ms": "2"}


def test_synonyms_list_where_a_value_comes_from_in_kafkas_order():
    """KIP-226, as Kafka's ConfigHelper lists them: layer by layer, each layer by the key's
    names; Kafka's default belongs to the last name of a chain; the list starts at the key
    asked, so a value only an older name holds is left out."""
    layers = [(ConfigSource.DYNAMIC_BROKER_CONFIG, {}),
              (ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, {"log.retention.ms": "5"}),
              (ConfigSource.STATIC_BROKER_CONFIG, {"log.retention.hours": "2", "log.retention.ms": "7"})]
    chain = [(s.name, s.value, s.source.name) for s in topic_config_synonyms("retention.ms", {"retention.ms": "1"},
                                                                              layers)]
    assert chain == [("retention.ms", "1", "DYNAMIC_TOPIC_CONFIG"),
                     ("log.retention.ms", "5", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
                     ("log.retention.ms", "7", "STATIC_BROKER_CONFIG"),
                     ("log.retention.hours", "2", "STATIC_BROKER_CONFIG"),
                     ("log.retention.hours", "168", "DEFAULT_CONFIG")]
    assert [s.name for s in broker_config_synonyms("log.retention.hours", layers)] == ["log.retention.hours"] * 2
    only_hours = [(ConfigSource.STATIC_BROKER_CONFIG, {"log.retention.hours": "2"})]
    assert topic_config_synonyms("retention.ms", {}, only_hours) == []  # Kafka's dropWhile
    assert [(s.name, s.source.name) for s in topic_config_synonyms("max.message.bytes", {}, [])] == [
        ("message.max.bytes", "DEFAULT_CONFIG")]
    assert topic_config_synonyms("flush.ms", {}, layers) == []  # the broker reads no key for it
