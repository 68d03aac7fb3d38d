from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import datakit.devices
from datakit.devices import select_gpus


@pytest.fixture(autouse=True)
def _restore_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _fresh_process(monkeypatch) -> None:
    """As in a process where CUDA has not started, on any machine: on a GPU machine the test process has started the
    driver (conftest's torch.cuda.is_available())."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(datakit.devices, "_loaded_driver", lambda: None)


def test_select_by_string_and_list(monkeypatch):
    _fresh_process(monkeypatch)
    assert select_gpus("1") == ["1"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    for spec, want in (([0, 2], ["0", "2"]), (" 3 , 1 ", ["3", "1"]), ("", []), (2, ["2"])):
        os.environ.pop("CUDA_VISIBLE_DEVICES")  # each as in a fresh shell (one that had a value: below)
        assert select_gpus(spec) == want and os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(want)


def test_a_schedulers_allocation_replaced_is_warned_of(monkeypatch):
    # the attack: SLURM gave the job GPUs 2 and 3 (CUDA_VISIBLE_DEVICES=2,3); select_gpus("0"), meant as "my first",
    # put the job on the machine's GPU 0, maybe another job's, without a word
    _fresh_process(monkeypatch)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with pytest.warns(UserWarning) as said:
        assert select_gpus("0") == ["0"]
    assert [str(w.message) for w in said] == [
        "select_gpus('0'): CUDA_VISIBLE_DEVICES was '2,3' (the GPUs a scheduler gave this job?) and is now '0', "
        "numbered as nvidia-smi numbers every GPU of the machine, which may be outside what was given; to use some of "
        "the GPUs given, leave CUDA_VISIBLE_DEVICES as it is and pick cuda:0, cuda:1, ... among them"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert select_gpus("0") == ["0"]  # the same again: nothing replaced


def test_bad_specs():
    with pytest.raises(ValueError, match=r"invalid GPU 'cuda:1' in 'cuda:1'"):
        select_gpus("cuda:1")
    with pytest.raises(ValueError, match=r"GPU 1 is listed twice in '1,1'"):
        select_gpus("1,1")
    assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_refuses_after_cuda_initialised(monkeypatch):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(RuntimeError) as e:
        select_gpus("1")
    assert str(e.value).startswith("select_gpus('1') must run before the first CUDA call")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


_FAKE_DRIVER = r"""
static int started = 0;
int cuInit(unsigned int flags) { (void)flags; started = 1; return 0; }
int cuDeviceGetCount(int *count) { if (!started) return 3; *count = 2; return 0; }
"""


def test_refuses_after_the_driver_started_without_torchs_flag(tmp_path):
    # the attack: torch.cuda.is_available() (the README's idiom) starts the driver (cudaGetDeviceCount calls cuInit,
    # where NVML does not count the GPUs) without setting torch.cuda.is_initialized(): select_gpus('1') then went on,
    # and the job stayed on the GPU CUDA had picked. A driver library of the same calls, loaded in the process, stands
    # in for libcuda here: before cuInit it answers cuDeviceGetCount with CUDA_ERROR_NOT_INITIALIZED, as the real one
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    (tmp_path / "driver.c").write_text(_FAKE_DRIVER)
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "driver.c")], check=True)
    code = (
        "import ctypes, os, sys\n"
        "from datakit.devices import select_gpus\n"
        f"driver = ctypes.CDLL({str(lib)!r})\n"
        "print(select_gpus('0'))\n"  # loaded, not started: the choice applies
        "driver.cuInit(0)\n"
        "try:\n"
        "    select_gpus('1')\n"
        "except RuntimeError as e:\n"
        "    print(str(e).split(':')[0], os.environ['CUDA_VISIBLE_DEVICES'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.splitlines() == ["['0']", "select_gpus('1') must run before the first CUDA call 0"]


def test_importing_torch_first_is_fine():
    code = (
        "import torch, os\n"
        "from datakit.devices import select_gpus\n"
        "select_gpus('1')\n"
        "print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.device_count() <= 1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "True"]


def test_full_width_digits_and_one_gpu_twice_are_refused():
    # The attack: '１' (a full-width digit, as a Chinese input method types it) and '1,01' went into
    # CUDA_VISIBLE_DEVICES as they were: CUDA reads ASCII digits only, so '１' would hide every GPU.
    from datakit.devices import select_gpus

    with pytest.raises(ValueError) as e:
        select_gpus("１")
    assert str(e.value) == ("invalid GPU '１' in '１': use indices as nvidia-smi shows them (ASCII digits), or "
                            "UUIDs")  # fmt: skip
    with pytest.raises(ValueError, match=r"^GPU 1 is listed twice in '1,01'$"):
        select_gpus("1,01")


@pytest.mark.parametrize("spec", [None, 1.0, {0, 1}])
def test_select_gpus_refuses_what_is_no_list_of_gpus_in_one_line(spec):
    # the attack: select_gpus(None) raised "TypeError: 'NoneType' object is not iterable"
    with pytest.raises(ValueError) as e:
        select_gpus(spec)
    assert str(e.value) == f"GPU selection must be indices like '0,2' or [0, 2], got {spec!r}"


def test_numpy_integers_and_the_old_mig_form_are_gpus(monkeypatch):
    # the attacks: select_gpus(np.int64(1)) (an index drawn from an array, argmin of free memory) and
    # select_gpus(np.array([0, 2])) were "GPU selection must be indices"; the MIG form of drivers before R470,
    # 'MIG-GPU-<uuid>/<gi>/<ci>', "invalid GPU"
    import numpy as np

    _fresh_process(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    assert select_gpus(np.int64(1)) == ["1"] and os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert select_gpus(np.array([0, 2])) == ["0", "2"] and os.environ["CUDA_VISIBLE_DEVICES"] == "0,2"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    mig = "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0"
    assert select_gpus(mig) == [mig] and os.environ["CUDA_VISIBLE_DEVICES"] == mig
    with pytest.raises(ValueError, match=r"^invalid GPU 'GPU-5c89852c/7/0' in "):  # the /gi/ci form is MIG's alone
        select_gpus("GPU-5c89852c/7/0")
    with pytest.raises(ValueError) as e:
        select_gpus([np.True_])
    assert str(e.value) == ("invalid GPU 'True' in [np.True_]: use indices as nvidia-smi shows them (ASCII digits), "
                            "or UUIDs")  # fmt: skip
