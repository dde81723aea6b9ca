"""The README's claims about the sync models, checked under a 3x straggler.

One workload (the server and 4 workers, worker 1 three times slower, the shared work budget, the
same seed, learning rate and epochs for every model).

On real ranks (5 MPI processes; each model runs once per module) the behaviour that does not depend
on how the 2 cores are scheduled:

* every sync model processes exactly the shared budget of samples;
* SSP's clock spread between active workers stays within s + 1, and the straggler makes it reach s.

On the simulator's virtual clock (same cores, policies and kernels; a fixed modeled step time, so
the result is deterministic) the claims that depend on time, which real ranks on an oversubscribed
2-core machine cannot assert without flaking:

* ESP's and PSP's final test loss is at most 2% above BSP's (no convergence lost);
* ESP and PSP finish the same budget sooner than BSP, and PSP's total waiting is below BSP's.
"""
import pytest

from mpikanel.config import make_config
from mpikanel.sim.run import SimOptions, simulate

from launch import run_train
from test_train_e2e import assert_no_lost_work

#: 18000 training rows x 5 epochs = 90000 samples; worker rank 1 takes 3x its compute time per step
#: 400 features and 256-row batches: a step costs about a millisecond, so the injected straggler (not
#: scheduling noise on a 2-core machine) decides who waits
STRAGGLER = ["--slowdown", "1:3", "--synthetic-rows", "20000", "--synthetic-features", "400", "--batch-size",
             "256", "--epochs", "5", "--seed", "0", "--lr", "0.2"]
#: each test may start up to two runs of the module's (each has its own 300 s timeout)
pytestmark = [pytest.mark.timeout(900), pytest.mark.alone]      # wall times and waits compared
SAMPLES = 5 * 18000
RANKS = 5
SSP_S = 2
MODELS = {"bsp": ["--sync", "bsp"], "asp": ["--sync", "asp"], "esp": ["--sync", "esp"],
          "psp": ["--sync", "psp"], "ssp": ["--sync", "ssp", "--staleness", str(SSP_S)]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each model's summary on the straggler workload, run on first use."""
    done: dict[str, dict] = {}

    def get(sync: str) -> dict:
        if sync not in done:
            proc, s = run_train(RANKS, *MODELS[sync], *STRAGGLER, tmp_path=tmp_path_factory.mktemp(sync),
                                timeout=300)
            assert proc.returncode == 0, proc.stderr
            assert s["budget"] == "shared" and s["workers"] == RANKS - 1
            assert_no_lost_work(s)
            done[sync] = s
        return done[sync]
    return get


@pytest.mark.parametrize("sync", list(MODELS))
def test_every_model_processes_the_shared_budget(sync, runs):
    s = runs(sync)
    assert s["samples"] == s["samples_budget"] == SAMPLES
    assert sum(w["samples"] for w in s["per_worker"]) == SAMPLES
    by_rank = {w["rank"]: w for w in s["per_worker"]}
    assert by_rank[1]["slowdown"] == 3.0 and by_rank[1]["injected_s"] > 0
    assert all(w["samples"] > 0 for w in s["per_worker"])


def test_ssp_clock_spread_stays_within_s_plus_1_and_reaches_s(runs):
    s = runs("ssp")
    # the bound holds (s + 1: a released worker pushes once more before it is held) and was
    # exercised: the fast workers ran ahead of the straggler by at least s pushes
    assert SSP_S <= s["clock_spread_max"] <= SSP_S + 1, s["clock_spread_max"]


#: the same workload on the virtual clock: a step costs 1 ms (3 ms on the straggler)
SIM = dict(slowdown="1:3", synthetic_rows=20000, synthetic_features=400, batch_size=256, epochs=5, seed=0,
           lr=0.2, quiet=True, progress="off")


@pytest.fixture(scope="module")
def simulated():
    """Each model's summary on the simulated straggler workload, run on first use."""
    done: dict[str, dict] = {}

    def get(sync: str) -> dict:
        if sync not in done:
            extra = {"staleness": SSP_S} if sync == "ssp" else {}
            done[sync] = simulate(make_config({**SIM, "sync": sync, **extra}), SimOptions(4, step_time=1e-3))
            assert done[sync]["samples"] == SAMPLES
        return done[sync]
    return get


@pytest.mark.parametrize("sync", ["esp", "psp"])
def test_final_loss_at_most_2_percent_above_bsp(sync, simulated):
    bsp, other = simulated("bsp"), simulated(sync)
    assert other["test_loss"] <= 1.02 * bsp["test_loss"], (sync, other["test_loss"], bsp["test_loss"])


@pytest.mark.parametrize("sync", ["esp", "psp"])
def test_esp_and_psp_finish_the_budget_sooner_than_bsp(sync, simulated):
    bsp, other = simulated("bsp"), simulated(sync)
    assert other["wall_s"] < 0.75 * bsp["wall_s"], (sync, other["wall_s"], bsp["wall_s"])


def test_psp_waits_less_than_bsp(simulated):
    bsp, psp = simulated("bsp"), simulated("psp")
    bsp_wait = sum(w["wait_s"] for w in bsp["per_worker"])
    psp_wait = sum(w["wait_s"] for w in psp["per_worker"])
    assert bsp_wait > 0 and psp_wait < 0.5 * bsp_wait, (psp_wait, bsp_wait)
