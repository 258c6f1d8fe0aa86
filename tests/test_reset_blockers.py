"""Reset blockers beyond persistenced and MPS: each daemon with its exact stop command (B), the
nvidia_drm modeset blocker, Confirm's words (every GPU; Kubernetes-run daemons), and R's notes
(NVSwitch peers without the fabric manager, MIG)."""
from __future__ import annotations

import pytest

from console.actions.plan import plan_action
from console.actions.verify import blockers_cleared
from console.diagnosis import diagnose, who
from console.model import Gpu, MigInstance, NodeSnapshot, Proc
from console.sources.cgroup import parse_path
from console.sources.local.source import LocalSource, read_sys
from console.sources.parse import parse_sys
from console.sources.sim import SimSource
from console.sim.node import SimNode
from fake_pynvml import FakeNvml, eight_gpus

ID = "4f2a0c1e9b7d5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a5e3a1c2b4d6f8e0a1b2c"
UID = "9d1e2c3b-7a6f-4e5d-8c9b-0a1b2c3d4e5f"


def proc(pid: int, args: str, *, devices=("/dev/nvidiactl", "/dev/nvidia0"), cgroup: str | None = None,
         comm: str | None = None, user: str = "root") -> Proc:
    name = comm or args.split()[0].rsplit("/", 1)[-1][:15]
    return Proc(pid=pid, ppid=1, state="S", user=user, name=name, cmdline=args, start_ticks=1000 + pid,
                device_files=tuple(devices), cgroup=parse_path(cgroup) if cgroup else None)


def node(procs=(), *, used=(60000, 4), pm=False, modeset=None, nvswitches=None, mig=False) -> NodeSnapshot:
    gpus = tuple(Gpu(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB", f"00000000:{0x18 + i:02X}:00.0", u, 81920,
                     persistence_mode=pm, mig_mode=mig if i == 0 else False,
                     mig_instances=(MigInstance(0, "3g.40gb", "MIG-a", 0), MigInstance(0, "3g.40gb", "MIG-b", 1))
                     if mig and i == 0 else ())
                 for i, u in enumerate(used))
    return NodeSnapshot(name="gpu07", taken_at=1000.0, gpus=gpus, processes=tuple(procs),
                        drm_modeset=modeset, nvswitches=nvswitches)


DAEMONS = [
    (proc(1500, "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm"), "systemctl stop nvidia-dcgm"),
    (proc(1510, "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv",
          cgroup="/system.slice/dcgm-exporter.service"), "systemctl stop dcgm-exporter"),
    (proc(1520, "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg"),
     "systemctl stop nvidia-fabricmanager"),
    (proc(1530, "/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg"), "systemctl stop nvidia-imex"),
    (proc(1540, "/usr/bin/nvsm_api_gateway", comm="nvsm_api_gatewa"), "systemctl stop nvsm"),
    (proc(1550, "/usr/lib/xorg/Xorg vt1 -displayfd 3 -auth /run/user/120/gdm/Xauthority"),
     "systemctl stop display-manager"),
    (proc(1560, "/usr/bin/Xwayland :0 -rootless"), "systemctl stop display-manager"),
    (proc(1570, "/usr/bin/gnome-shell"), "systemctl stop display-manager"),
    (proc(1580, "/usr/bin/nvidia-persistenced --user nvidia-persistenced",
          cgroup="/system.slice/nvidia-persistenced.service"), "systemctl stop nvidia-persistenced"),
    (proc(1590, "nvidia-cuda-mps-control -d"), "echo quit | timeout 10 nvidia-cuda-mps-control"),
]


@pytest.mark.parametrize("daemon, command", DAEMONS, ids=[d.name for d, _ in DAEMONS])
def test_each_blocker_is_listed_by_b_with_its_exact_stop_command(daemon, command):
    snap = node([daemon])
    assert who.blocker_daemon(daemon) is not None
    plan = plan_action(snap, "clear-blockers")
    assert plan.commands == (command,)
    assert [t.pid for t in plan.targets] == [daemon.pid]
    assert any("affects every GPU on gpu07" in n for n in plan.notes)
    # never a kill-holders target: B stops it
    assert daemon.pid not in who.holder_pids(snap, [0])


def test_b_stops_them_all_in_order_then_nvidia_drm_then_persistence_mode():
    snap = node([d for d, _ in DAEMONS], pm=True, modeset=True)
    plan = plan_action(snap, "clear-blockers", gpus=[0])
    assert plan.commands == ("systemctl stop display-manager", "echo quit | timeout 10 nvidia-cuda-mps-control",
                             "systemctl stop dcgm-exporter", "systemctl stop nvidia-dcgm", "systemctl stop nvsm",
                             "systemctl stop nvidia-imex", "systemctl stop nvidia-fabricmanager",
                             "systemctl stop nvidia-persistenced", "modprobe -r nvidia_drm", "nvidia-smi -pm 0 -i 0")
    assert "nvidia_drm (modeset=Y)" in plan.title
    assert any("Module nvidia_drm is in use" in n for n in plan.notes)


def test_a_display_server_blocks_only_while_it_holds_the_gpu():
    idle = proc(1550, "/usr/lib/xorg/Xorg vt1", devices=())     # on the integrated GPU: no /dev/nvidia*
    assert who.blocker_daemon(idle) is None
    assert plan_action(node([idle]), "clear-blockers").commands == ()


def test_a_kubernetes_run_dcgm_exporter_gets_a_note_not_a_command():
    pod = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{ID}.scope"
    exporter = proc(1510, "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/dcp-metrics-included.csv", cgroup=pod)
    plan = plan_action(node([exporter]), "clear-blockers")
    assert plan.commands == ()
    assert any("runs in Kubernetes" in n and f"pod {UID}" in n and "systemctl cannot stop it" in n
               for n in plan.notes)
    assert plan.refusals and "can be stopped from here" in plan.refusals[0]


def test_a_docker_run_exporter_is_stopped_by_its_container_and_a_bare_one_by_its_pid():
    in_docker = proc(1510, "/usr/bin/dcgm-exporter", cgroup=f"/system.slice/docker-{ID}.scope")
    assert plan_action(node([in_docker]), "clear-blockers").commands == ("docker stop 4f2a0c1e9b7d",)
    bare = proc(1511, "/usr/bin/dcgm-exporter", cgroup="/user.slice/user-0.slice/session-4.scope")
    (line,) = plan_action(node([bare]), "clear-blockers").commands
    assert line.endswith("then kill -s TERM 1511; else echo 'refused: PID 1511 is no longer the same process "
                         "(start time changed)' >&2; exit 3; fi") and "= 2511 ]" in line


def test_modeset_is_a_blocker_for_diagnosis_and_verification():
    snap = node([], used=(60000, 4), modeset=True)
    fs = diagnose(snap)
    (b,) = [f for f in fs if f.kind == "reset-blocker"]
    assert "nvidia_drm loaded with modeset=Y" in b.summary and b.evidence["drm_modeset"] is True
    ghost = next(f for f in fs if f.kind == "ghost-memory")
    assert ghost.rung == "clear-blockers" and ghost.next_step.startswith("Unload nvidia_drm (modeset=Y) first")
    assert not blockers_cleared(snap, [0])
    assert blockers_cleared(node([], modeset=None), [0]) and blockers_cleared(node([], modeset=False), [0])
    assert not [f for f in diagnose(node([], modeset=False)) if f.kind == "reset-blocker"]


def test_r_says_when_nvswitch_peers_must_be_reset_together():
    fm = proc(1520, "/usr/bin/nv-fabricmanager -c fabricmanager.cfg", devices=("/dev/nvidia-nvswitch0",))
    without = plan_action(node([], nvswitches=6), "reset", gpus=[0])
    assert any("NVSwitch system (6 NVSwitches) without nvidia-fabricmanager running: NVLink peers must be "
               "reset together" in n for n in without.notes)
    with_fm = plan_action(node([fm], nvswitches=6), "reset", gpus=[0])
    assert not any("reset together" in n for n in with_fm.notes)
    assert not any("reset together" in n for n in plan_action(node([]), "reset", gpus=[0]).notes)
    # stopping the fabric manager on such a system says what it leads to
    b = plan_action(node([fm], nvswitches=6), "clear-blockers")
    assert any("NVLink peers must be reset together" in n for n in b.notes)


def test_r_on_a_mig_gpu_says_the_whole_gpu_and_every_instance_is_reset():
    plan = plan_action(node([], mig=True), "reset", gpus=[0])
    assert plan.commands == ("nvidia-smi -r -i 0",)
    assert any("GPU 0 is in MIG mode: `nvidia-smi -r -i 0` resets the whole GPU and its 2 MIG instances "
               "(3g.40gb, 3g.40gb)" in n for n in plan.notes)
    assert not any("MIG" in n for n in plan_action(node([], mig=True), "reset", gpus=[1]).notes)


# ---------------------------------------------------------------- read from the node

def test_sys_section_parsing():
    assert parse_sys("modeset Y\nnvswitch /dev/nvidia-nvswitch0 /dev/nvidia-nvswitch1\n") == \
        parse_sys("modeset Y\nnvswitch /dev/nvidia-nvswitch0 /dev/nvidia-nvswitch1")
    s = parse_sys("modeset Y\nnvswitch /dev/nvidia-nvswitch0 /dev/nvidia-nvswitch1\n")
    assert (s.drm_modeset, s.nvswitches) == (True, 2)
    s = parse_sys("modeset \nnvswitch /dev/nvidia-nvswitch[0-9]*\n")       # not loaded, no match
    assert (s.drm_modeset, s.nvswitches) == (None, 0)
    assert parse_sys("modeset N\n").drm_modeset is False and parse_sys("").nvswitches is None


async def test_simulated_node_with_modeset_and_nvswitches():
    node_ = SimNode("reset-required")
    node_.drm_modeset, node_.nvswitches = True, 6
    snap = await SimSource(node=node_).poll()
    assert (snap.drm_modeset, snap.nvswitches) == (True, 6)
    plan = plan_action(snap, "clear-blockers", gpus=[3])
    assert plan.commands == ("systemctl stop nvidia-persistenced", "modprobe -r nvidia_drm", "nvidia-smi -pm 0 -i 3")
    reset = plan_action(snap, "reset", gpus=[3])
    assert any("reset together" in n for n in reset.notes)


async def test_local_source_reads_modeset_and_nvswitch_files(tmp_path):
    (tmp_path / "modeset").write_text("Y\n")
    for k in range(2):
        (tmp_path / f"nvidia-nvswitch{k}").write_text("")
    (tmp_path / "nvidia-nvswitchctl").write_text("")
    s = read_sys(str(tmp_path / "modeset"), str(tmp_path / "nvidia-nvswitch[0-9]*"))
    assert (s.drm_modeset, s.nvswitches) == (True, 2)
    src = LocalSource("local", nvml_module=FakeNvml(eight_gpus()[:1]), dmesg_command=("true",),
                      drm_modeset_file=str(tmp_path / "modeset"), nvswitch_glob=str(tmp_path / "nvidia-nvswitch[0-9]*"))
    try:
        snap = await src.poll()
    finally:
        await src.close()
    assert (snap.drm_modeset, snap.nvswitches) == (True, 2)
    s = read_sys(str(tmp_path / "absent"), str(tmp_path / "none[0-9]*"))
    assert (s.drm_modeset, s.nvswitches) == (None, 0)


async def test_simulated_b_stops_persistenced_by_the_unit_its_cgroup_names():
    snap = await SimSource(scenario="reset-required").poll()
    persistenced = next(p for p in snap.processes if p.name == "nvidia-persiste")
    assert persistenced.cgroup.unit == "nvidia-persistenced.service"
    assert who.stop_of(persistenced).command == "systemctl stop nvidia-persistenced"



# ---------------------------------------------------------------- a GPU user cannot aim B


USER_SCOPE = f"/user.slice/user-65534.slice/user@65534.service/app.slice/docker-{ID}.scope"


@pytest.mark.parametrize("path", [
    USER_SCOPE,
    f"/user.slice/user-1000.slice/session-3.scope/docker/{ID}",
    f"/user.slice/user-65534.slice/user@65534.service/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
    f"cri-containerd-{ID}.scope",
    f"/system.slice/foo.service/docker-{ID}.scope",
])
def test_a_runtime_scope_in_a_users_own_cgroup_names_no_container(path):
    """Any user may create cgroups named like a runtime's in a subtree delegated to them, and
    container IDs are world-readable: only the runtimes' own paths name a container."""
    cg = parse_path(path)
    assert cg.container_id is None and cg.runtime is None and cg.pod_uid is None and not cg.in_container


def test_a_fake_persistenced_in_another_users_container_cgroup_gets_b_to_stop_nothing():
    """As nobody: a process named nvidia-persistenced, holding a device file, in a cgroup named
    docker-<victim>.scope. B proposes neither `docker stop <victim>` nor the real service's stop."""
    fake = proc(4242, "nvidia-persistenced --user nobody", cgroup=USER_SCOPE, user="nobody")
    assert who.blocker_daemon(fake) is None
    plan = plan_action(node([fake], pm=True), "clear-blockers")
    assert not any("docker" in c or "systemctl" in c for c in plan.commands), plan.commands


@pytest.mark.parametrize("program", ["nv-fabricmanager", "nv-hostengine", "nvidia-cuda-mps-server"])
def test_a_users_process_merely_named_like_a_daemon_is_no_blocker(program):
    fake = proc(4243, program, devices=(), user="alice")
    assert who.blocker_daemon(fake) is None
    assert who.blocker_daemon(proc(4244, program, devices=())) is not None      # the real one, as root
    plan = plan_action(node([fake]), "clear-blockers")
    assert not any("systemctl" in c or "mps-control" in c for c in plan.commands), plan.commands


def test_the_real_persistenced_under_its_own_user_is_still_a_blocker():
    real = proc(1563, "/usr/bin/nvidia-persistenced --user nvidia-persistenced", user="nvidia-persistenced",
                cgroup="/system.slice/nvidia-persistenced.service")
    assert who.blocker_daemon(real) is not None
    assert who.stop_of(real).command == "systemctl stop nvidia-persistenced"


def test_confirm_says_whose_processes_a_container_stop_takes_down():
    exporter = proc(1510, "/usr/bin/dcgm-exporter", cgroup=f"/system.slice/docker-{ID}.scope")
    sidecar = proc(1520, "python3 push.py", cgroup=f"/system.slice/docker-{ID}.scope", user="metrics", devices=())
    plan = plan_action(node([exporter, sidecar]), "clear-blockers")
    assert plan.commands == ("docker stop 4f2a0c1e9b7d",)
    assert "container 4f2a0c1e9b7d runs 2 processes seen here (users metrics, root): stopping it stops them all" \
        in plan.notes
