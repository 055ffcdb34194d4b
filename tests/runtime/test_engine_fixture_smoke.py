import numpy as np


def test_tiny_models_load_and_score(univariate_engine, vitals_model):
    from trep_edge.runtime.core.engine import load_engine

    w = univariate_engine.card.window
    zu, zm = univariate_engine.last_step_pair(np.zeros((3, w, 1), np.float32), np.zeros(3, np.int64))
    assert zu.shape == (3, 16) and not np.allclose(zu, zm)
    assert univariate_engine.card.calibration is not None
    assert load_engine(vitals_model, "cpu").card.channels == ["HR", "SpO2", "RESP"]


def test_engine_sessions_let_idle_threads_sleep(univariate_engine):
    # Spinning intra-op threads took CPU from the monitor's Python on a 2-core box for no gain (docs/performance.md).
    sessions = [univariate_engine.session, *univariate_engine.graphs.values()]
    assert len(sessions) >= 2
    for session in sessions:
        assert session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
