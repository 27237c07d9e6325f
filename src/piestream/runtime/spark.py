"""The SparkSession piestream runs on (spark-notes §7): local mode by default, tuned for small jobs.

One long-lived session per process: a Spark job costs ~0.1-0.2 s warm but the session takes
seconds to start, so the driver, the tests and the benchmarks all share one.
"""

from __future__ import annotations

import os
import sys
import warnings
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"


def _quiet_log_config() -> str:
    return str(resources.files("piestream") / "conf" / "log4j2-quiet.properties")


def spark_session(
    master: str | None = None,
    *,
    app_name: str = "piestream",
    shuffle_partitions: int = 2,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession with piestream's settings.

    `master` defaults to ``$PIESTREAM_SPARK_MASTER`` or ``local[2]``; use ``local[2,4]`` to let
    failed tasks be retried (tests of exactly-once behaviour do).
    """
    warnings.filterwarnings("ignore", category=FutureWarning)  # pyspark's "pandas >= 3" warning
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("PIESTREAM_SPARK_MASTER", DEFAULT_MASTER)
    log_conf = _quiet_log_config()
    java_opts = f"-XX:+UseSerialGC -Dlog4j2.configurationFile=file:{log_conf}"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.default.parallelism", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
        .config("spark.sql.execution.arrow.pyspark.validateSchema.enabled", "true")
        .config("spark.python.worker.reuse", "true")
        # the JVM talks to its Python workers over Unix domain sockets (Spark >= 4.1) instead of
        # loopback TCP: each Python stage of an epoch's job costs ~35 ms less (an empty 4-stage
        # epoch 0.27 s -> 0.17-0.20 s)
        .config("spark.python.unix.domain.socket.enabled", "true")
        .config("spark.python.daemon.module", "piestream.runtime.spark_daemon")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
    )
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pin_jvm_classes(spark)
    return spark


def cluster_task_slots(sc: Any) -> int:
    """How many tasks the cluster's executors can run at once now (their cores over
    ``spark.task.cpus``): what Spark's barrier execution mode counts before it starts a stage, and
    what ADAPTIVE streaming jobs follow. It changes as executors register and are lost; 0 while
    none is registered (a cluster still starting) or when the context is gone."""
    try:
        jsc = sc._jsc.sc()
        return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # the context is stopping: no slots to speak of
        return 0


#: Classes PySpark looks up by their short name on every RDD it builds (several per epoch).
PINNED_CLASSES = (
    "org.apache.spark.api.python.PythonRDD",
    "org.apache.spark.api.python.PythonUtils",
    "org.apache.spark.api.python.SimplePythonFunction",
    "org.apache.spark.api.python.PythonPartitioner",
    "org.apache.spark.api.python.PairwiseRDD",
)


def pin_jvm_classes(spark: SparkSession) -> None:
    """Resolve `PINNED_CLASSES` once and keep them on the context's py4j view.

    py4j resolves ``jvm.PythonRDD`` on every access with a round trip in which the JVM first
    tries `Class.forName("PythonRDD")`, which fails only after searching every jar on the class
    path: a large part of the driver JVM's CPU in an empty epoch. The view looks attributes up
    normally before asking the JVM, so an attribute holding the class answers at once."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    for name in PINNED_CLASSES:
        short = name.rsplit(".", 1)[1]
        if short not in vars(jvm):
            cls = jvm
            for part in name.split("."):
                cls = getattr(cls, part)
            setattr(jvm, short, cls)
