"""The Java client backend's install: kafka-clients (and Kafka Streams) of a release from
Maven Central, and onceproof's agent (run/java/OnceproofAgent.java) compiled against
them, cached per release, agent source and dependencies."""
from __future__ import annotations

import functools
import hashlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from onceproof.cluster.provision import cache_dir, need
from onceproof.errors import SetupError
from onceproof.workloads.plan import RELEASE

# What the Java client backend's agent (run/java/OnceproofAgent.java) needs beside
# kafka-clients: JSON for its wire, and a logging binding that discards (the history
# records what matters; a client's log lines would only crowd the harness's stderr).
JACKSON_VERSION = "2.21.7"
_JAVA_CLIENT_EXTRA = [("com.fasterxml.jackson.core", "jackson-databind", JACKSON_VERSION),
                      ("org.slf4j", "slf4j-nop", "1.7.36")]
AGENT_SOURCE = Path(__file__).resolve().parent / "java" / "OnceproofAgent.java"


@dataclass(frozen=True)
class JavaClientDist:
    """The Java client of one release, with onceproof's agent compiled against it."""
    version: str
    home: Path

    @property
    def classpath(self) -> str:
        return f"{self.home / 'classes'}:{self.home / 'libs' / '*'}"

    @functools.cached_property
    def config_names(self) -> dict[str, list[str]]:
        """The settings its producer and its consumer know, as the client lists them."""
        import json
        return json.loads((self.home / "config-names.json").read_text())


def ensure_java_client(version: str) -> JavaClientDist:
    """kafka-clients `version` from Maven Central, and the agent built against it (javac),
    cached per version, agent source and dependencies: a changed agent is built again."""
    if not RELEASE.fullmatch(version) or tuple(map(int, version.split("."))) < (3, 3, 0):
        raise SetupError(f"unknown Java client version {version!r}: use a kafka-clients release "
                         "from 3.3.0 on, such as 4.4.0 or 3.8.0 (--java-client-version)")
    # Kafka Streams of the same release, for the `streams` role (its RocksDB comes
    # along, though the agent's stores are in memory).
    deps = [("org.apache.kafka", "kafka-clients", version),
            ("org.apache.kafka", "kafka-streams", version), *_JAVA_CLIENT_EXTRA]
    body = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                   f"<version>{v}</version></dependency>" for g, a, v in deps)
    # Jackson's BOM holds its modules to one release: without it Maven takes the
    # annotations an older kafka-streams names (3.8.0: 2.16), which databind 2.21 cannot load.
    bom = ("<dependencyManagement><dependencies><dependency><groupId>com.fasterxml.jackson"
           f"</groupId><artifactId>jackson-bom</artifactId><version>{JACKSON_VERSION}</version>"
           "<type>pom</type><scope>import</scope></dependency></dependencies></dependencyManagement>")
    pom = ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
           "<groupId>onceproof</groupId><artifactId>java-client</artifactId><version>1</version>"
           f"{bom}<dependencies>{body}</dependencies></project>")
    digest = hashlib.sha256(AGENT_SOURCE.read_bytes() + pom.encode()).hexdigest()[:12]
    home = cache_dir() / "java-client" / version / digest
    dist = JavaClientDist(version, home)
    if (home / ".complete").exists():
        return dist
    need("javac", "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless)")
    mvn = need("mvn", "install Maven (Debian: apt-get install maven)")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom)
    libs = home / "libs"
    shutil.rmtree(libs, ignore_errors=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime"], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise SetupError(f"mvn could not fetch kafka-clients {version} from Maven Central "
                         f"({' | '.join(tail)}); check the version exists and the network")
    classes = home / "classes"
    shutil.rmtree(classes, ignore_errors=True)
    proc = subprocess.run([need("javac", ""), "-nowarn", "-d", str(classes), "-cp", str(libs / "*"),
                           str(AGENT_SOURCE)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SetupError(f"the Java client agent does not build against kafka-clients {version}: "
                         f"{proc.stderr.strip().splitlines()[0] if proc.stderr.strip() else proc.stdout}")
    names = subprocess.run(["java", "-cp", dist.classpath, "OnceproofAgent", "--config-names"],
                           capture_output=True, text=True)
    if names.returncode != 0:
        raise SetupError(f"the Java client agent for {version} does not run: {names.stderr.strip()[-300:]}")
    (home / "config-names.json").write_text(names.stdout)
    (home / ".complete").write_text(version)
    return dist
