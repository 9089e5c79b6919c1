"""The Containerfile, checked without a container engine: its instructions say what the
docs promise (slim base, non-root, `wq daemon`, the seed's config path), and its build
steps, replayed in a fresh virtualenv, install a `wq` that starts and migrates."""

from __future__ import annotations

import json
import shlex
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.deploy.manifests import ROOT

SEED_CONFIG = "/etc/workqueue/config.yml"


@dataclass
class Stage:
    """One build stage: its base image and its (instruction, arguments) in order."""

    base: str
    name: str | None
    steps: list[tuple[str, str]] = field(default_factory=list)

    def args(self, instruction: str) -> list[str]:
        """The arguments of every `instruction` of this stage."""
        return [args for op, args in self.steps if op == instruction]


def stages() -> list[Stage]:
    """The Containerfile's stages (continuation lines joined, comments dropped)."""
    text = (ROOT / "Containerfile").read_text().replace("\\\n", " ")
    found: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        op, args = op.upper(), args.strip()
        if op == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(base=words[0], name=name))
        else:
            found[-1].steps.append((op, args))
    return found


def test_a_slim_multi_stage_build_runs_wq_daemon_as_a_non_root_user() -> None:
    build, runtime = stages()
    assert build.base == runtime.base
    assert build.base.startswith("docker.io/library/python:3.") and build.base.endswith("-slim")
    user = runtime.args("USER")[-1]
    assert user.isdigit() and int(user) != 0, "a numeric uid lets runAsNonRoot check it"
    assert json.loads(runtime.args("ENTRYPOINT")[-1]) == ["wq", "daemon"]
    assert json.loads(runtime.args("CMD")[-1]) == ["--config", SEED_CONFIG]
    env = " ".join(runtime.args("ENV"))
    assert f"WQ_CONFIG={SEED_CONFIG}" in env
    # The runtime takes the build stage's virtualenv, and `wq` is found on its PATH.
    venv = shlex.split(build.args("RUN")[0])[-1]
    assert f"--from={build.name} {venv} {venv}" in runtime.args("COPY")
    assert f"PATH={venv}/bin:$PATH" in env
    port = runtime.args("EXPOSE")[-1]
    assert any(f"127.0.0.1:{port}/healthz" in args for args in runtime.args("HEALTHCHECK"))


def test_no_secret_and_no_kerberos_is_baked_in() -> None:
    for stage in stages():
        for op, args in stage.steps:
            assert "kerberos" not in args, (op, args)
            if op in {"ARG", "ENV"}:
                assert not any(word in args.upper() for word in ("TOKEN", "SECRET", "PASSWORD"))


def _replay_build(build: Stage, src: Path, venv: Path) -> None:
    """The build stage's COPY and install steps, into `src` and the virtualenv `venv`."""
    workdir = Path(build.args("WORKDIR")[0])
    image_venv = shlex.split(build.args("RUN")[0])[-1]
    for args in build.args("COPY"):
        *sources, dest = shlex.split(args)
        target = src / (workdir / dest).relative_to(workdir)
        for source in sources:
            origin = ROOT / source
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, target / origin.name)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The dependencies come from this test environment, not from the network: only wq
    # itself is built and installed from what the COPY steps put in place.
    (venv_site(venv) / "test-deps.pth").write_text(site.getsitepackages()[0] + "\n")
    (install,) = [a for a in build.args("RUN") if " install " in a]
    argv = shlex.split(install)
    assert argv[:2] == [f"{image_venv}/bin/pip", "install"] and argv[-1] == "."
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    subprocess.run(
        [*pip, "install", *argv[2:-1], "--no-deps", "--no-build-isolation", "--quiet", "."],
        cwd=src,
        check=True,
        timeout=240,
    )


def venv_site(venv: Path) -> Path:
    """The site-packages directory of a virtualenv made by this Python."""
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


@pytest.mark.timeout(300)
def test_the_build_steps_install_a_wq_that_starts_and_migrates(tmp_path: Path) -> None:
    build, _ = stages()
    venv = tmp_path / "opt-wq"
    _replay_build(build, tmp_path / "src", venv)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    run = {"cwd": tmp_path, "env": env, "capture_output": True, "text": True, "timeout": 120}

    # wq comes from the installed copy, not from the source tree.
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import wq; print(wq.__file__)"], **run
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where

    help_ = subprocess.run(["wq", "daemon", "--help"], **run)
    assert help_.returncode == 0, help_.stderr
    assert "--config" in help_.stdout

    # The migrations were installed with it: the image's `wq db migrate` works.
    config = tmp_path / "config.yml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'wq.db'}\n")
    migrate = subprocess.run(["wq", "db", "migrate", "--config", str(config)], **run)
    assert migrate.returncode == 0, migrate.stderr
    assert "migrated from empty to" in migrate.stdout
    current = subprocess.run(["wq", "db", "current", "--config", str(config)], **run)
    assert current.returncode == 0 and "up to date" in current.stdout, current
