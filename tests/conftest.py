import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="session")
def dask_client():
    """A real ``dask.distributed.LocalCluster`` (2 worker processes x 1 thread), shared by
    the session.  The client is *not* the default one: a test runs on it inside
    ``with dask_client.as_current():``; every other Dask test uses a local scheduler."""
    distributed = pytest.importorskip("distributed")
    pytest.importorskip("dask.array")
    import logging

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.ERROR)
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
