"""Fetch the real parts the harness runs: Kafka from Maven Central, toxiproxy from the Go
module proxy. Both land in a per-version cache outside the repository and are reused.

Kafka's POM leaves the logging binding out, so we ask Maven for the broker plus the
binding that version's own distribution ships (log4j2 for 4.x, reload4j for 3.x).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from onceproof.errors import SetupError

# The newest patch of every KRaft minor line, newest first: the releases the nightly's
# version matrix runs (`onceproof versions`). Other patches Maven Central serves run too.
TESTED_KAFKA_VERSIONS = ("4.4.0", "4.3.1", "4.2.2", "4.1.2", "4.0.2", "3.9.2", "3.8.1",
                         "3.7.2", "3.6.2", "3.5.2", "3.4.1", "3.3.2")
# The newest release that starts: it runs valid under faults (onceproof versions), and
# the whole test suite runs on it in CI.
DEFAULT_KAFKA_VERSION = TESTED_KAFKA_VERSIONS[0]
# CI's pair, and the releases hunts run on unless told: the default, and the newest line
# before KIP-890's transaction verification (3.6), where KAFKA-12671 is documented.
CI_KAFKA_VERSIONS = (DEFAULT_KAFKA_VERSION, "3.5.2")
TOXIPROXY_VERSION = "v2.12.0"  # the newest release; kafkatoxic/go.mod pins the same

_BINDINGS = {
    # major version -> (groupId, artifactId, version) the distribution ships for logging
    4: [("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
        ("org.apache.logging.log4j", "log4j-core", "2.24.3")],
    3: [("org.slf4j", "slf4j-reload4j", "1.7.36"), ("ch.qos.reload4j", "reload4j", "1.2.25")],
}


def cache_dir() -> Path:
    root = os.environ.get("ONCEPROOF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "onceproof")
    return Path(root)


def kafka_version(requested: str | None = None) -> str:
    version = requested or os.environ.get("ONCEPROOF_KAFKA_VERSION") or DEFAULT_KAFKA_VERSION
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", version)
    if not match or not (3, 3) <= (int(match.group(1)), int(match.group(2))) < (5, 0):
        raise SetupError(
            f"unknown Kafka version {version!r}: use a KRaft release from 3.3.0 to 4.x, such "
            f"as {', '.join(TESTED_KAFKA_VERSIONS[:3])} or {TESTED_KAFKA_VERSIONS[-1]} "
            f"(--kafka-version or ONCEPROOF_KAFKA_VERSION)")
    return version


def need(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise SetupError(f"{tool} not found on PATH: {hint}")
    return path


@dataclass(frozen=True)
class KafkaDist:
    version: str
    libs: Path

    @property
    def release(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.version.split("."))

    @property
    def major(self) -> int:
        return self.release[0]

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def _pom(version: str, deps: list[tuple[str, str, str]] | None = None) -> str:
    deps = deps or [("org.apache.kafka", "kafka_2.13", version)] + _BINDINGS[int(version.split(".")[0])]
    body = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>" for g, a, v in deps)
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>onceproof</groupId><artifactId>kafka-dist</artifactId><version>1</version>"
        f"<dependencies>{body}</dependencies></project>")


def ensure_kafka(version: str | None = None) -> KafkaDist:
    version = kafka_version(version)
    home = cache_dir() / "kafka" / version
    libs = home / "libs"
    if (home / ".complete").exists():
        return KafkaDist(version, libs)
    need("java", "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jre-headless)")
    _fetch(home, _pom(version), f"Kafka {version}")
    return KafkaDist(version, libs)


def _fetch(home: Path, pom: str, what: str) -> None:
    """The jars `pom` depends on, from Maven Central into home/libs, once: home/.complete
    marks a fetch that finished."""
    mvn = need("mvn", "install Maven (Debian: apt-get install maven)")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(pom)
    shutil.rmtree(home / "libs", ignore_errors=True)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-U", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={home / 'libs'}", "-DincludeScope=runtime"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise SetupError(f"mvn could not fetch {what} from Maven Central "
                         f"({' | '.join(tail)}); check the version exists and the network")
    (home / ".complete").write_text(what)


@dataclass(frozen=True)
class FeatureTool:
    """Kafka's FeatureCommand of one release: its main class and the classpath it runs on."""
    main: str
    classpath: str


# Where a release keeps its FeatureCommand: in kafka-tools (a Maven artifact of its own,
# fetched beside the broker's) from 3.5 on, where the broker's jar keeps at most a shim
# that calls it; in the broker's jar (Scala) before.
_TOOLS_MAIN, _CORE_MAIN = "org.apache.kafka.tools.FeatureCommand", "kafka.admin.FeatureCommand"


def _has_class(folder: Path, main: str) -> bool:
    entry = main.replace(".", "/") + ".class"
    for jar in folder.glob("kafka*.jar"):
        with zipfile.ZipFile(jar) as z:
            if entry in z.namelist():
                return True
    return False


def ensure_kafka_tools(version: str) -> FeatureTool:
    """Kafka `version`'s FeatureCommand, its kafka-tools fetched from Maven Central."""
    dist = ensure_kafka(version)
    if dist.release < (3, 5):
        return FeatureTool(_CORE_MAIN, dist.classpath)
    home = cache_dir() / "kafka" / version / "tools"
    libs = home / "libs"
    if not (home / ".complete").exists():
        _fetch(home, _pom(version, [("org.apache.kafka", "kafka-tools", version)]),
               f"kafka-tools {version}")
        if not _has_class(libs, _TOOLS_MAIN):
            (home / ".complete").unlink()
            raise SetupError(f"kafka-tools {version} has no {_TOOLS_MAIN}")
    # The broker's jars first: the tools' copies of shared libraries are the same release.
    return FeatureTool(_TOOLS_MAIN, f"{dist.classpath}:{libs / '*'}")


# The toxiproxy server the harness runs is our own build of toxiproxy's library: its
# server plus the `kafka` toxic (harness/cluster/kafkatoxic/, Go), which reads Kafka's
# request framing so a fault can hold, drop the response of, or repeat one chosen request.
# toxiproxy documents this as the way to add toxics (CREATING_TOXICS.md): a program that
# registers them and starts the server. Its go.mod pins toxiproxy at TOXIPROXY_VERSION.
KAFKATOXIC_SOURCE = Path(__file__).resolve().parent / "kafkatoxic"


def _source_digest(folder: Path) -> str:
    """What the build depends on, so an edited toxic is rebuilt and an unchanged one is not."""
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        if (f.suffix == ".go" and not f.name.endswith("_test.go")) or f.name in ("go.mod", "go.sum"):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def ensure_toxiproxy() -> Path:
    """The toxiproxy server with the kafka toxic, built by `go build` and cached by the
    digest of its source (Go fetches toxiproxy's module from the Go module proxy)."""
    home = cache_dir() / "toxiproxy" / f"{TOXIPROXY_VERSION}-kafka-{_source_digest(KAFKATOXIC_SOURCE)}"
    binary = home / "server"
    if binary.exists():
        return binary
    go = need("go", "install Go 1.23 or newer (Debian: apt-get install golang)")
    home.mkdir(parents=True, exist_ok=True)
    partial = home / "server.partial"
    # GOFLAGS=-mod=mod: the sums in go.sum are checked; nothing is written back to the
    # source folder, which may be read-only inside an installed wheel.
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    proc = subprocess.run([go, "build", "-trimpath", "-o", str(partial), "."],
                          cwd=KAFKATOXIC_SOURCE, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or not partial.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-2:]
        raise SetupError(f"go build of the toxiproxy server (toxiproxy {TOXIPROXY_VERSION} "
                         f"with the kafka toxic) failed ({' | '.join(tail)}); check Go is 1.23 "
                         "or newer and the Go module proxy is reachable")
    partial.rename(binary)
    return binary
