"""Cloud-init rendering: golden per stack, valid for `cloud-init schema`, strict templates."""

from __future__ import annotations

import shutil
import subprocess

import jinja2
import pytest

from gpufleet.components import bootstrap, stackconfig
from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init

STACKS = stackconfig.stack_names()
EXPIRES = 1_900_000_000
# Fixed contexts for what no stack covers, so every cloud and fabric has a golden.
CONTEXTS = {
    "context-local": BootstrapContext(
        "sandbox", "local", "local", 1, 3, "me", "ssh-ed25519 AAAAuser me", "<host key>",
        "ssh-ed25519 AAAAhost", "none", None,
    ),
    "context-gcp-a3mega": BootstrapContext(
        "mega", "gcp", "a3-megagpu-8g", 0, 2, "gpufleet", "ssh-ed25519 AAAAuser u", "<host key>",
        "ssh-ed25519 AAAAhost", "tcpxo", EXPIRES,
    ),
}  # fmt: skip


def rendered(stack: str, node: int = 0) -> str:
    spec = stackconfig.spec_from_stack(stack)
    return render_cloud_init(bootstrap.placeholder_context(spec, node, EXPIRES))


@pytest.mark.parametrize("stack", STACKS)
def test_golden_per_stack(golden, stack):
    golden(f"cloud-init/{stack}.yaml", rendered(stack))


@pytest.mark.parametrize("name", CONTEXTS)
def test_golden_per_fixed_context(golden, name):
    golden(f"cloud-init/{name}.yaml", render_cloud_init(CONTEXTS[name]))


def schema_check(path) -> subprocess.CompletedProcess:
    r = subprocess.run(["cloud-init", "schema", "-c", str(path)], capture_output=True, text=True)
    if "unrecognized arguments" in r.stderr:  # older cloud-init spells it --config-file
        r = subprocess.run(
            ["cloud-init", "schema", "--config-file", str(path)], capture_output=True, text=True
        )
    return r


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
@pytest.mark.parametrize("stack", STACKS)
def test_cloud_init_schema_accepts_every_stack(tmp_path, stack):
    path = tmp_path / "user-data.yaml"
    path.write_text(rendered(stack, node=1))
    r = schema_check(path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Valid cloud-config" in r.stdout


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
@pytest.mark.parametrize("name", CONTEXTS)
def test_cloud_init_schema_accepts_every_fixed_context(tmp_path, name):
    path = tmp_path / "user-data.yaml"
    path.write_text(render_cloud_init(CONTEXTS[name]))
    r = schema_check(path)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
def test_cloud_init_schema_rejects_a_broken_document(tmp_path):
    path = tmp_path / "user-data.yaml"
    path.write_text("#cloud-config\nusers: 7\nwrite_files: [{content: x}]\n")
    assert schema_check(path).returncode != 0  # the check above can fail


def test_every_step_is_embedded_and_run_in_order():
    text = rendered("aws-p4d")
    names = [name for name, _ in bootstrap.step_files()]
    assert names[0] == "00-base.sh" and "run-steps.sh" in names and "lib.sh" in names
    positions = [text.index(f"- path: /opt/gpufleet/steps/{n}") for n in names]
    assert positions == sorted(positions)
    assert "ExecStart=/bin/bash /opt/gpufleet/steps/run-steps.sh" in text


def test_node_env_carries_versions_fabric_and_expiry():
    ctx = BootstrapContext("c", "aws", "p5.48xlarge", 1, 2, "ubuntu", "u", "k", "h", "efa", EXPIRES)
    env = bootstrap.node_env(ctx)
    assert env["GPUFLEET_NVSWITCH"] == "1" and env["GPUFLEET_GPUS"] == "8"
    assert env["GPUFLEET_FABRIC_MANAGER"] == env["GPUFLEET_DRIVER_VERSION"]
    assert env["GPUFLEET_EXPIRES_AT"] == str(EXPIRES) and env["GPUFLEET_NODE"] == "node-1"
    assert env["GPUFLEET_EFA_INSTALLER"] and "GPUFLEET_TCPX_PLUGIN" not in env
    assert env["GPUFLEET_NCCL_LIBRARY_PATH"].startswith("/opt/amazon/efa/lib:")
    assert env["GPUFLEET_PINS"].split(",")[:2] == ["driver_branch", "driver_version"]


def test_versions_follow_cloud_and_fabric():
    a3 = bootstrap.node_env(CONTEXTS["context-gcp-a3mega"])
    assert a3["GPUFLEET_TCPXO_PLUGIN"].endswith(":v1.0.8-1") and "GPUFLEET_TCPX_RXDM" not in a3
    a2 = bootstrap.node_env(
        BootstrapContext("c", "gcp", "a2-highgpu-8g", 0, 2, "u", "u", "k", "h", "none", EXPIRES)
    )
    assert a2["GPUFLEET_VERSION_SET"] == "gcp-2026-11" and "GPUFLEET_TCPXO_PLUGIN" not in a2


def test_unknown_instance_type_renders_with_no_gpu_steps():
    ctx = BootstrapContext("c", "aws", "x9.mystery", 0, 1, "u", "u", "k", "h", "none", EXPIRES)
    env = bootstrap.node_env(ctx)
    assert env["GPUFLEET_GPUS"] == "0" and env["GPUFLEET_NVSWITCH"] == "0"
    assert render_cloud_init(ctx).startswith("#cloud-config")


def test_local_node_has_no_pins_and_no_nccl_file():
    text = render_cloud_init(CONTEXTS["context-local"])
    env = bootstrap.node_env(CONTEXTS["context-local"])
    assert env["GPUFLEET_VERSION_SET"] == "none" and env["GPUFLEET_PINS"] == ""
    assert env["GPUFLEET_EXPIRES_AT"] == "" and "- path: /etc/gpufleet/nccl.env" not in text


def test_env_file_reads_back_through_bash(tmp_path):
    """The steps source /etc/gpufleet/env: every value, quotes and spaces included, survives."""
    import yaml

    spec = stackconfig.spec_from_stack("azure-nd-a100")
    ctx = bootstrap.placeholder_context(spec, 0, EXPIRES)
    doc = yaml.safe_load(render_cloud_init(ctx))
    env_text = next(f["content"] for f in doc["write_files"] if f["path"] == "/etc/gpufleet/env")
    (tmp_path / "env").write_text(env_text)
    want = bootstrap.node_env(ctx)
    r = subprocess.run(
        ["bash", "-c", f"set -a; . {tmp_path / 'env'}; env -0"],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    got = dict(kv.split("=", 1) for kv in r.stdout.split("\0") if kv.startswith("GPUFLEET_")
               or kv.startswith("AZURE_"))  # fmt: skip
    assert got == want


def test_host_key_lands_as_a_block(tmp_path):
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAA\nBBB\n-----END OPENSSH PRIVATE KEY-----\n"
    ctx = BootstrapContext(
        "c", "gcp", "a3-highgpu-8g", 0, 2, "u", "ssh-ed25519 X u", key, "ssh-ed25519 Y h", "tcpx"
    )
    import yaml

    doc = yaml.safe_load(render_cloud_init(ctx))
    assert doc["ssh_keys"]["ed25519_private"] == key
    assert doc["users"][1]["ssh_authorized_keys"] == ["ssh-ed25519 X u"]
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    assert "NCCL_NET=GPUDirectTCPX_v7" in files["/etc/gpufleet/nccl.env"]


@pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="needs OpenSSH")
def test_sshd_reads_the_drop_in_that_every_node_gets(tmp_path):
    """The node's sshd_config.d file, as cloud-init writes it, parsed by the real sshd (-T
    prints the settings in effect)."""
    import yaml

    from gpufleet.provision.localsshd import find_sshd

    spec = stackconfig.spec_from_stack("aws-p5")
    doc = yaml.safe_load(render_cloud_init(bootstrap.placeholder_context(spec, 0, EXPIRES)))
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    key = tmp_path / "hostkey"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    conf = tmp_path / "sshd_config"
    conf.write_text(files[bootstrap.SSHD_DROPIN_PATH] + f"HostKey {key}\n")
    r = subprocess.run([find_sshd(), "-T", "-f", str(conf)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "maxsessions 64" in r.stdout.splitlines()


def test_template_is_strict_about_missing_values():
    with pytest.raises(jinja2.UndefinedError):
        bootstrap._template().render(cluster="c")


def _boot_lease_script(text: str) -> str | None:
    """The shell the node's bootcmd runs for its boot lease, if its cloud-init has one."""
    import yaml

    for cmd in yaml.safe_load(text).get("bootcmd", []):
        if cmd[:3] == ["cloud-init-per", "instance", "gpufleet-boot-lease"]:
            assert cmd[3:5] == ["sh", "-c"]
            return cmd[5]
    return None


def test_a_run_cluster_arms_a_lease_from_the_nodes_clock_at_first_boot(tmp_path):
    """Issue 19, item 3: a `run` cluster's nodes arm a lease at first boot, from their own
    clock, before SSH answers; a CLI killed while provisioning leaves them for that long, not
    for the hard expiry. Run here with a `date` 1000 s ahead of this machine's: the lease
    counts from the node's clock, not from when the user data was rendered."""
    import time

    from gpufleet.jobs.run import BOOT_LEASE_MINUTES, with_boot_lease

    spec = with_boot_lease(stackconfig.spec_from_stack("aws-p5"))
    assert spec.boot_lease_minutes == BOOT_LEASE_MINUTES
    text = render_cloud_init(bootstrap.placeholder_context(spec, 1, EXPIRES))
    script = _boot_lease_script(text)
    assert script is not None
    state = tmp_path / "var/lib/gpufleet"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/date").write_text(
        '#!/bin/sh\nif [ "$1" = +%s ]; then echo $(( $(/bin/date +%s) + 1000 )); fi\n'
    )
    (tmp_path / "bin/date").chmod(0o755)
    env = {"PATH": f"{tmp_path}/bin:/usr/bin:/bin"}
    before = int(time.time())
    node_script = script.replace("/var/lib/gpufleet", str(state))
    subprocess.run(["sh", "-c", node_script], env=env, check=True)
    lease = int((state / "lease").read_text())
    lease_s = BOOT_LEASE_MINUTES * 60
    assert before + 1000 + lease_s <= lease <= time.time() + 1000 + lease_s + 1
    assert sorted(p.name for p in state.iterdir()) == ["lease"]  # written by rename


@pytest.mark.parametrize("stack", ["aws-p5", "gcp-a3", "azure-nd-h100"])
def test_up_clusters_and_stacks_arm_no_boot_lease(stack):
    """`up` and plain `pulumi up` of a stack: the hard expiry alone, no lease until a CLI
    writes one."""
    spec = stackconfig.spec_from_stack(stack)
    assert spec.boot_lease_minutes is None
    assert _boot_lease_script(rendered(stack)) is None
    assert "bootcmd" not in rendered(stack)


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
def test_cloud_init_schema_accepts_a_run_clusters_boot_lease(tmp_path):
    spec = stackconfig.spec_from_stack("gcp-a3").with_(boot_lease_minutes=45)
    path = tmp_path / "user-data.yaml"
    path.write_text(render_cloud_init(bootstrap.placeholder_context(spec, 0, EXPIRES)))
    r = schema_check(path)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("stack", ["aws-p5", "gcp-a3", "azure-nd-h100"])
def test_every_clouds_run_nodes_arm_the_boot_lease_through_the_real_fleet(stack):
    """The boot lease as each cloud's GpuFleet renders it, not a hand-made context: AWS and Azure
    nodes read their expiry from a tag and carry none in user data, which once left their `run`
    nodes without a boot lease (issue 19 merge); a stack (`up`) has none."""
    from gpufleet.components.preview import evaluate
    from gpufleet.jobs.run import BOOT_LEASE_MINUTES, with_boot_lease
    from tests.components.test_host_key_channels import user_data_texts

    raw = stackconfig.stack_config(stack)
    plain = stackconfig.spec_from_config(raw, stack=stack)
    for spec, armed in ((with_boot_lease(plain), True), (plain, False)):
        p = evaluate(
            lambda s=spec: stackconfig.exports(stackconfig.build(s, expires_at=1_900_000_000)),
            config=stackconfig.pulumi_config(raw),
            stack=stack,
        )
        texts = user_data_texts(p)
        assert texts
        for t in texts:
            assert ("gpufleet-boot-lease" in t) == armed, (stack, armed)
            if armed:
                assert f"+ {BOOT_LEASE_MINUTES * 60} ))" in t


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_preemption_watcher_is_the_first_service_runcmd_starts_on_a_cloud(cloud):
    """A notice reaches the ranks whatever later fails; it comes back after a reboot
    (enabled); its script is the node copy of scripts/preempt_watch.sh."""
    import yaml

    from gpufleet.components import preempt

    ctx = BootstrapContext(
        "c", cloud, "x", 0, 2, "u", "k", "", "", "none", EXPIRES, extra={"A": "1"}
    )
    doc = yaml.safe_load(render_cloud_init(ctx))
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    unit = files["/etc/systemd/system/gpufleet-preempt.service"]
    assert f"ExecStart=/bin/bash {preempt.SCRIPT_PATH} --cloud {cloud} --state " in unit
    assert "WantedBy=multi-user.target" in unit
    # stopped at shutdown before the network and docker go (its TERM trap's GET, the ranks in
    # containers); TERM to the script alone, which ends its own curl, then a bounded stop
    lines = set(unit.splitlines())
    assert "After=network-online.target docker.service" in lines
    assert {"Wants=network-online.target", "KillMode=mixed", "TimeoutStopSec=10"} <= lines
    assert files[preempt.SCRIPT_PATH].rstrip("\n") == preempt.node_script(cloud).rstrip("\n")
    starts = [c for c in doc["runcmd"] if c[:2] == ["systemctl", "enable"]]
    assert starts[0][-1] == "gpufleet-preempt.service"
    assert doc["runcmd"].index(starts[0]) == 1  # right after daemon-reload


@pytest.mark.parametrize(
    ("cloud", "extra"), [("local", {}), ("vm", {}), ("aws", {"GPUFLEET_BAKE": "1"})]
)
def test_no_preemption_watcher_without_a_metadata_service_or_on_a_bake(cloud, extra):
    ctx = BootstrapContext("c", cloud, "x", 0, 1, "u", "k", "h", "h", "none", None, extra=extra)
    assert "gpufleet-preempt" not in render_cloud_init(ctx)
