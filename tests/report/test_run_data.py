"""What a run left on disk, read back for its report: the epochs' figures from a real CSVLogger's metrics.csv or a
real TensorBoardLogger's event files (with the alerts' texts), and how many alerts the run had."""

import math

import pytest

from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from lightning_profkit.metric_names import PREFIX
from lightning_profkit.report.run_data import Epoch, RunData, read_run


def logged(logger, epochs):
    for epoch, (ratio, alert) in enumerate(epochs):
        logger.log_metrics({"epoch": float(epoch), PREFIX + "data_wait_ratio": ratio,
                            PREFIX + "data_wait_alert": alert}, step=10 * epoch + 9)
        logger.log_metrics({"train_loss": 0.5}, step=10 * epoch + 5)  # the user's own rows: left out
    logger.save()


def test_epochs_are_read_from_a_csv_loggers_file(tmp_path):
    logger = CSVLogger(tmp_path, name="run", version=0)
    logged(logger, [(0.1, 0.0), (0.6, 1.0), (math.nan, 0.0)])
    data = read_run(logger.log_dir)
    assert data.source.endswith("metrics.csv") and data.alerts == []
    assert [(e.epoch, e.step, e.data_wait_ratio, e.data_wait_alert) for e in data.epochs] == [
        (0, 9, 0.1, 0.0), (1, 19, 0.6, 1.0)]  # a ratio that is not a number is no epoch of ours
    assert data.epochs[0].gpu_idle_ratio is None  # not logged (a CPU run): absent, not zero


def test_epochs_and_alert_texts_are_read_from_tensorboard_event_files(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    logged(logger, [(0.1, 0.0), (0.6, 1.0)])
    logger.experiment.add_text("profkit/alerts", "**data wait** 60%", global_step=19)
    logger.experiment.flush()
    data = read_run(logger.log_dir)
    assert [(e.epoch, e.step) for e in data.epochs] == [(0, 9), (1, 19)]
    assert data.epochs[1].data_wait_ratio == pytest.approx(0.6) and [(a.step, a.markdown) for a in data.alerts] == [(19, "**data wait** 60%")]
    assert data.alert_count == 1


def test_a_run_that_logged_nothing_is_empty(tmp_path):
    assert read_run(str(tmp_path)) == RunData(None)


def test_an_episode_of_flagged_epochs_is_one_alert():
    """Without TensorBoard's alert texts (a CSVLogger run), alerts are the episodes: epochs flagged in a row."""
    flags = [1.0, 1.0, 0.0, 1.0, None]
    data = RunData("metrics.csv", [Epoch(i, i, 0.3, data_wait_alert=f) for i, f in enumerate(flags)])
    assert data.alert_count == 2


def test_the_fits_count_of_alerts_wins_over_the_episodes():
    """A long episode with two alerts in it (cooldown passed): the logged count says 2 where the flags say 1."""
    epochs = [Epoch(i, i, 0.3, data_wait_alert=1.0, data_wait_alerts=float(n)) for i, n in enumerate([1, 1, 2])]
    assert RunData("metrics.csv", epochs).alert_count == 2


def test_numbers_that_are_not_finite_in_event_files_are_absent(tmp_path):
    """NaN logged to TensorBoard (a worst rank, an epoch) is absent from the report, which no longer fails on it."""
    from lightning_profkit.report.page import page

    logger = TensorBoardLogger(tmp_path, name="run[1]", version=0)  # a glob character in the folder's name too
    logger.log_metrics({"epoch": math.nan, PREFIX + "data_wait_ratio": 0.5, PREFIX + "data_wait_worst_rank": math.nan,
                        PREFIX + "step_time_ms_mean": math.inf}, step=9)
    logger.log_metrics({"epoch": 1.0, PREFIX + "data_wait_ratio": math.nan}, step=19)
    logger.save()
    data = read_run(logger.log_dir)
    assert [(e.epoch, e.step, e.data_wait_ratio, e.data_wait_worst_rank, e.step_time_ms_mean) for e in data.epochs] == [
        (0, 9, 0.5, None, None)]  # a ratio that is not a number is no epoch of ours, as in a CSV file
    assert "50.0%" in page(logger.log_dir, data, [], str(tmp_path), logger.log_dir)
