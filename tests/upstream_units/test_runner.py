"""The runner of upstream's unit tests and its pytest plugin, on a tiny project of tests (seconds, no mirror):
what the plugin changes in the test process, how outcomes are read from its log, a crash, and the
per-folder comparison."""

from __future__ import annotations

import json
import textwrap

import pytest

from testkit.upstream_units import runner

pytest.importorskip("torch")

TESTS = textwrap.dedent('''
    import os
    import socket
    import urllib.request

    import pytest
    import torch
    import torch.distributed as dist


    def test_nccl_becomes_gloo_world_size_one():
        torch.cuda.set_device(0)  # no-ops on a CPU build
        torch.cuda.synchronize()
        dist.init_process_group(backend="nccl", world_size=int(os.environ["WORLD_SIZE"]), rank=0)
        group = dist.new_group([0], backend="nccl")
        assert dist.get_backend() == "gloo" and dist.get_backend(group) == "gloo"
        value = torch.ones(1)
        dist.all_reduce(value, group=group)
        assert value.item() == 1.0 and os.environ["WORLD_SIZE"] == "1"
        dist.destroy_process_group()


    def test_no_network():
        with pytest.raises(OSError, match="megatron_on_cpu: no network"):
            urllib.request.urlopen("https://example.invalid/data.zip", timeout=5)
        with pytest.raises(OSError, match="megatron_on_cpu: no network"):
            socket.create_connection(("192.0.2.1", 80), timeout=5)


    def test_data_download_is_refused_and_the_conftest_goes_on():
        assert "downloads no test data" in os.environ["TINY_DOWNLOAD"]


    def test_blocked_module_is_not_installed():
        with pytest.raises(ModuleNotFoundError):
            import colorsys  # noqa: F401 (refused by ROCMPATCH_UNITS_BLOCK=colorsys)


    def test_fails():
        assert False


    @pytest.fixture
    def broken():
        raise RuntimeError("setup")


    def test_setup_error(broken):
        pass


    @pytest.mark.skip(reason="needs a GPU")
    def test_skipped():
        pass


    def test_z_crashes():
        os.abort()


    def test_zz_after_the_crash():
        pass
''')


# As core_v0.15's conftest: an autouse session fixture fetches the data set with a function that
# exits the process when the network is down (it catches Exception, not SystemExit).
CONFTEST = textwrap.dedent('''
    import os
    import sys

    import pytest


    def get_oldest_release_and_assets(assets_dir):
        sys.exit(1)


    @pytest.fixture(scope="session", autouse=True)
    def ensure_test_data():
        try:
            get_oldest_release_and_assets(assets_dir="data")
        except Exception as e:
            os.environ["TINY_DOWNLOAD"] = str(e)
''')


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tree = tmp_path_factory.mktemp("tree")
    (tree / "tests" / "unit_tests" / "sub").mkdir(parents=True)
    (tree / "tests" / "unit_tests" / "conftest.py").write_text(CONFTEST)
    (tree / "tests" / "unit_tests" / "sub" / "test_tiny.py").write_text(TESTS)
    (tree / "tests" / "unit_tests" / "test_broken_import.py").write_text("import not_a_module_anywhere\n")
    return runner.run_pytest(tree, ["tests/unit_tests"], tmp_path_factory.mktemp("work"), block=("colorsys",), run_timeout=240)


def test_plugin_turns_nccl_into_gloo_and_keeps_the_network_and_blocked_modules_out(tiny_run):
    outcomes = tiny_run.outcomes
    prefix = "tests/unit_tests/sub/test_tiny.py::"
    for name in ("test_nccl_becomes_gloo_world_size_one", "test_no_network", "test_data_download_is_refused_and_the_conftest_goes_on",
                 "test_blocked_module_is_not_installed"):
        assert outcomes[prefix + name] == "passed", (name, outcomes)


def test_outcomes_of_each_kind_and_a_crash_is_survived(tiny_run):
    prefix = "tests/unit_tests/sub/test_tiny.py::"
    assert tiny_run.outcomes[prefix + "test_fails"] == "failed"
    assert tiny_run.outcomes[prefix + "test_setup_error"] == "error"
    assert tiny_run.outcomes[prefix + "test_skipped"] == "skipped"
    assert tiny_run.outcomes[prefix + "test_z_crashes"] == "crashed"
    assert tiny_run.outcomes[prefix + "test_zz_after_the_crash"] == "passed"  # the run went on after it
    assert tiny_run.outcomes["tests/unit_tests/test_broken_import.py"] == "error"  # collection error
    assert tiny_run.restarts == 1 and tiny_run.exit_code in (0, 1)


def test_read_log_teardown_failure_and_cut_line(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [
        {"nodeid": "a", "event": "start"}, {"nodeid": "a", "event": "setup", "outcome": "passed"},
        {"nodeid": "a", "event": "call", "outcome": "passed"}, {"nodeid": "a", "event": "teardown", "outcome": "failed"},
        {"nodeid": "b", "event": "start"}, {"nodeid": "b", "event": "setup", "outcome": "passed"},
    ]
    log.write_text("\n".join(json.dumps(r) for r in records) + '\n{"nodeid": "b", "ev')
    outcomes, running = runner.read_log(log)
    assert outcomes == {"a": "error"} and running == "b"


def test_compare_counts_per_folder_and_lists_regressions():
    tests_dir = "tests/unit_tests"
    baseline = {f"{tests_dir}/models/test_a.py::t1": "passed", f"{tests_dir}/models/test_a.py::t2": "failed",
                f"{tests_dir}/test_top.py::t3": "passed", f"{tests_dir}/models/test_b.py": "error"}
    series = {f"{tests_dir}/models/test_a.py::t1": "failed", f"{tests_dir}/models/test_a.py::t2": "passed",
              f"{tests_dir}/test_top.py::t3": "passed", f"{tests_dir}/models/test_b.py::t4": "skipped"}
    comparison = runner.compare(baseline, series, tests_dir)
    assert comparison.regressions == [f"{tests_dir}/models/test_a.py::t1"]
    assert comparison.unlocked == [f"{tests_dir}/models/test_a.py::t2"]
    models = comparison.table["models"]
    assert (models["baseline"]["passed"], models["baseline"]["failed"], models["baseline"]["error"]) == (1, 1, 1)
    assert (models["series"]["passed"], models["series"]["skipped"]) == (1, 1)
    assert comparison.table["(top level)"]["series"]["passed"] == 1
    text = runner.render(comparison, series)
    assert f"REGRESSION {tests_dir}/models/test_a.py::t1: failed with the series" in text
    assert text.splitlines()[-2].split()[:3] == ["total", "2/2/0/0", "2/1/1/0"]


def test_every_release_profile_names_its_requirements_file():
    assert runner.profiles()
    for release, profile in runner.profiles().items():
        assert profile.requirements.is_file(), release
        names = runner.patch_names(release)
        assert profile.subset and set(profile.baseline) <= set(names), release
