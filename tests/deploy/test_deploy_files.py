"""The deployment files in deploy/ say what they mean: systemd accepts the units, every TREP_EDGE_ variable they set
is a real setting, the commands they run parse to the intended shard and port, the StatefulSet's replica count
matches its shard count, its config loads, and the container recipe installs the runtime only, as a non-root user."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from trep_edge.cli import build_parser
from trep_edge.runtime.service.config import SECRET_KEYS, field_types, flag_overrides, load_config, section_class, section_names

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ROOT = DEPLOY.parent
UNITS = ["trep-edge.service", "trep-edge@.service"]
K8S = DEPLOY / "k8s" / "trep-edge.yaml"
RECIPE = DEPLOY / "greengrass" / "com.example.TrepEdge.recipe.json"


def _settings() -> set[str]:
    names = {f"TREP_EDGE_{s.upper()}_{f.upper()}" for s in section_names() for f in field_types(section_class(s))}
    return names | set(SECRET_KEYS.values())


def _run_config(argv: list[str], tmp_path: Path):
    """The settings ``trep-edge run ARGV`` would use, with the config file replaced by an empty one."""
    args = build_parser().parse_args(argv)
    assert args.command == "run"
    (tmp_path / "empty.toml").write_text("")
    return load_config(tmp_path / "empty.toml", {}, flag_overrides(args))


def _shell_argv(command: str, env: dict[str, str]) -> list[str]:
    """The arguments a ``sh -c 'exec trep-edge run ...'`` command passes to trep-edge, expanded by a real shell."""
    probe = re.sub(r"exec \S*trep-edge ", "exec printf '%s\\n' ", command)
    out = subprocess.run(["sh", "-c", probe], env=env, capture_output=True, text=True, check=True, timeout=10).stdout
    return out.splitlines()


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_accepts_the_units_without_a_warning(tmp_path, unit):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed")
    text = (DEPLOY / "systemd" / unit).read_text()
    # verify checks that ExecStart's program exists: point it at this checkout's trep-edge.
    exe = shutil.which("trep-edge") or str(ROOT / ".venv" / "bin" / "trep-edge")
    local = tmp_path / unit.replace("@.", "@1.")
    local.write_text(text.replace("/opt/trep-edge/venv/bin/trep-edge", exe))
    result = subprocess.run(["systemd-analyze", "verify", str(local)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    for option in ("DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "Restart=on-failure",
                   "StateDirectory=trep-edge"):  # fmt: skip
        assert option in text


def test_every_environment_variable_the_deploy_files_set_is_a_setting():
    known = _settings()
    files = [*(DEPLOY / "systemd").glob("*.service"), DEPLOY / "Containerfile", K8S, RECIPE]
    for path in files:
        used = set(re.findall(r"TREP_EDGE_[A-Z0-9_]+", path.read_text()))
        assert used, f"{path} sets no TREP_EDGE_ variable"
        assert used <= known, f"{path.name}: {sorted(used - known)} are not settings (TREP_EDGE_<SECTION>_<FIELD>)"


def test_the_shard_template_unit_runs_shard_i_of_n_on_its_own_port(tmp_path):
    text = (DEPLOY / "systemd" / "trep-edge@.service").read_text()
    command = re.search(r"^ExecStart=/bin/sh -c '(.*)'$", text, re.M)[1].replace("%i", "2")
    config = _run_config(_shell_argv(command, {"SHARDS": "3"}), tmp_path)
    assert config.monitor.shard == "2/3" and config.http.port == 9110
    assert "TREP_EDGE_MQTT_CLIENT_ID=trep-edge-%H-shard-%i" in text and "StateDirectory=trep-edge/shard-%i" in text


def _k8s_value(key: str) -> str:
    (value,) = re.findall(rf"^\s*{key}:\s*(.+)$", K8S.read_text(), re.M)
    return value.strip().strip("'\"")


def test_statefulset_pod_ordinal_becomes_the_shard_and_replicas_match_the_shard_count(tmp_path):
    replicas, shards = int(_k8s_value("replicas")), int(_k8s_value("shards"))
    assert replicas == shards, "replicas and the ConfigMap's shards must be the same N"
    command = re.search(r"^\s*args: \['(.*)'\]$", K8S.read_text(), re.M)[1]  # one single-quoted YAML string
    config = _run_config(_shell_argv(command, {"HOSTNAME": "trep-edge-2", "SHARDS": str(shards)}), tmp_path)
    assert config.monitor.shard == f"2/{shards}"
    assert _k8s_value("podManagementPolicy") == "Parallel"
    text = K8S.read_text()
    assert "volumeClaimTemplates:" in text and "mountPath: /var/lib/trep-edge" in text
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert re.search(rf"{probe}:\s*\n\s*httpGet:\s*\n\s*path: {path}\n", text), probe


def test_statefulset_config_loads_and_serves_on_the_probed_port(tmp_path):
    lines = K8S.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "monitor.toml: |") + 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    block = []
    for line in lines[start:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        block.append(line[indent:])
    (tmp_path / "monitor.toml").write_text("\n".join(block))
    config = load_config(tmp_path / "monitor.toml", {})
    assert config.http.host == "0.0.0.0" and config.http.port == int(_k8s_value("containerPort"))
    assert config.mqtt.tls and config.mqtt.username


def test_container_recipe_installs_the_runtime_only_as_a_non_root_user():
    text = (DEPLOY / "Containerfile").read_text()
    assert all(re.match(r"python:[\d.]+-slim", base) for base in re.findall(r"^FROM (\S+)", text, re.M))
    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "'.[cpu]'" in code and "trep-edge[cpu]" in code and not re.search(r"torch|\[train\]|\[gpu\]", code)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and not user[-1].startswith(("0", "root"))
    ignore = (DEPLOY / "Containerfile.dockerignore").read_text()
    for source in re.findall(r"^COPY (?!--)(.+) \S+$", text, re.M):
        for part in source.split():
            assert (ROOT / part).exists(), f"COPY {part}: no such file in the repository"
            assert f"!{part}" in ignore, f"{part} is excluded from the build context"
    assert 'VOLUME ["/var/lib/trep-edge"]' in text and "TREP_EDGE_STATE_PATH=/var/lib/trep-edge/" in text


def test_greengrass_recipe_uses_only_configuration_it_declares():
    recipe = json.loads(RECIPE.read_text())
    declared = recipe["ComponentConfiguration"]["DefaultConfiguration"]
    script = recipe["Manifests"][0]["Lifecycle"]["Run"]["Script"]
    assert set(re.findall(r"\{configuration:/(\w+)\}", script)) <= set(declared)
    assert "--shard {configuration:/shard}" in script
    assert recipe["Manifests"][0]["Lifecycle"]["Run"]["RequiresPrivilege"] is False
