"""Starting Spark for the analytics tools: quiet, quick, local by default.

Spark's defaults suit a long-lived cluster shell, not a one-shot report: an INFO log, a
progress bar, a web UI, 200 shuffle partitions for a few thousand rows. Here the log is at
WARN (and task failures, which the tools report themselves in one line, are not logged at
all), the UI is off and shuffles are sized to the cores. Under ``spark-submit`` the JVM is
already running, so only what can change at run time is applied.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import AnalyticsError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

APP_NAME = "kraft-analytics"
DEFAULT_MASTER = "local[*]"
#: Spark's log configuration for these tools (WARN; task failures not logged: the tools
#: report them in one line).
LOG4J2 = Path(__file__).with_name("log4j2.properties")


#: What an executor asks for on a loopback standalone master: a worker's memory by default.
EXECUTOR_MEMORY = "512m"


def find_java() -> str:
    """The java Spark will start (JAVA_HOME's, else the PATH's); AnalyticsError if none."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        raise AnalyticsError(f"JAVA_HOME is {home}, but {java} is not there; Spark needs Java "
                             "17 or newer")
    on_path = shutil.which("java")
    if on_path is None:
        raise AnalyticsError("Java was not found (Spark needs Java 17 or newer): install it or "
                             "set JAVA_HOME")
    return on_path


def under_spark_submit() -> bool:
    """Whether spark-submit started this process (its JVM is waiting for us)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start(master: str | None = None, app_name: str = APP_NAME) -> SparkSession:
    """A SparkSession with the ``kraft`` (metadata) and ``kraft-topic`` (topics, clients.spark)
    data sources registered. ``master`` None means
    ``local[*]``, or whatever spark-submit was given."""
    if not under_spark_submit():
        find_java()
        if master is None:
            master = DEFAULT_MASTER
    if local_master(master) or loopback_master(master):
        # Tasks run on this machine, in this interpreter (with this project's packages); bind
        # to loopback, where a loopback master's executors reach the driver, and which keeps
        # Spark from warning that the host name resolves to it.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if LOG4J2.exists():  # absent only from an install without package data: Spark's then
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
    if local_master(master):
        conf["spark.driver.memory"] = "2g"
    elif loopback_master(master):
        # Executors must fit a worker of ``kraft analytics standalone`` (Spark asks for 1g and
        # would wait for such a worker forever). A conf, not the environment variable alone:
        # an earlier session of this process may have started the JVM already.
        conf["spark.executor.memory"] = os.environ.get("SPARK_EXECUTOR_MEMORY", EXECUTOR_MEMORY)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # the JVM did not start: say why in one line
        raise AnalyticsError(f"Spark could not start: {first_line(e)}") from None
    spark.sparkContext.setLogLevel("WARN")
    from clients.spark import register as register_topics

    from .source import register

    register(spark)
    register_topics(spark)
    # The master spark-submit was given is only known now.
    master = spark.sparkContext.master
    if local_master(master) or loopback_master(master):  # this machine's cores run the tasks
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
        # The report caches the partitions table once and reads it a few times: compressing
        # the cache costs more CPU than the memory it saves at this size.
        spark.conf.set("spark.sql.inMemoryColumnarStorage.compressed", "false")
    if not local_master(master):
        ship_code(spark)
    return spark


def local_master(master: str | None) -> bool:
    """Whether tasks run in this machine's driver JVM (``local``, ``local[N]``,
    ``local[*]``); ``local-cluster[...]`` has executors of its own, like a real cluster."""
    return master is not None and (master == "local" or master.startswith("local["))


def loopback_master(master: str | None) -> bool:
    """Whether ``master`` is a standalone master on this machine's loopback (``standalone``'s
    default): its workers, and so its executors, run here."""
    host = (master or "").removeprefix("spark://").rsplit(":", 1)[0]
    return bool(master and master.startswith("spark://")) and (host == "localhost" or host.startswith("127."))


def ship_code(spark: SparkSession) -> None:
    """Send this project's packages to the executors (a cluster's Python workers do not
    have them); their dependencies (protobuf, immutables, pyarrow, and for topics grpcio, crc32c
    and the codecs) must be installed there."""
    folder = tempfile.mkdtemp(prefix="kraft-analytics-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # served until the driver ends
    spark.sparkContext.addPyFile(str(code_archive(Path(folder) / "pykraft.zip")))


#: The packages a task imports: the data sources' (metadata.analytics, clients.spark), theirs
#: (records, snapshots, the clients) and the floor they stand on.
SHIPPED_PACKAGES = ("metadata", "protos", "raft", "clients", "common")


def code_archive(archive: Path) -> Path:
    """A zip of this project's packages that tasks import, as Python workers put it on their path."""
    root = Path(__file__).resolve().parents[2]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for package in SHIPPED_PACKAGES:
            for path in sorted((root / package).rglob("*.py")):
                z.write(path, path.relative_to(root).as_posix())
    return archive


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
