"""mmapkit.ml.StreamingLogisticRegression as a scikit-learn estimator (issue 24,
defects 3, 5 and 6): pickling, defaults that work on raw data, label and input
validation, and scikit-learn's estimator checks."""

import multiprocessing
import pickle
import warnings

import _stores
import numpy as np
import pytest

from mmapkit.ml import StreamingLogisticRegression

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_breast_cancer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import FunctionTransformer  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from bench.ml_accuracy import GOAL, binary_datasets, split  # noqa: E402


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def store_of(path, X, y, dtype=np.float64):
    return _stores.store_of(path, X, y, dtype)


# ----- defect 3: a fitted model pickles -----------------------------------------


def test_fitted_model_pickles_and_predicts_in_a_spawned_pool(tmp):
    X, y = load_breast_cancer(return_X_y=True)
    m = StreamingLogisticRegression().fit(store_of(tmp / "fs", X, y))
    back = pickle.loads(pickle.dumps(m))
    assert np.array_equal(back.predict(X), m.predict(X))
    assert np.array_equal(back.predict_proba(X), m.predict_proba(X))
    back.partial_fit(X[:10], m.predict(X[:10]))  # training goes on after unpickling

    joblib = pytest.importorskip("joblib")
    joblib.dump(m, tmp / "m.joblib")
    assert np.array_equal(joblib.load(tmp / "m.joblib").predict(X), m.predict(X))

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        got = pool.apply(m.predict, (X,))
    assert np.array_equal(got, m.predict(X))


# ----- defect 5: defaults that work on raw data -----------------------------------


@pytest.mark.parametrize("name", [name for name, _, _ in binary_datasets()])
def test_defaults_within_one_point_of_logistic_regression(name):
    X, y = next((X, y) for n, X, y in binary_datasets() if n == name)
    Xtr, Xte, ytr, yte = split(X, y)
    ours = StreamingLogisticRegression().fit(Xtr, ytr).score(Xte, yte)
    ref = LogisticRegression(max_iter=5000).fit(Xtr, ytr).score(Xte, yte)
    assert ours >= ref - GOAL, (name, ours, ref)


def test_default_fit_on_a_raw_store_learns_and_folds_the_scaling(tmp):
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = split(X, y)
    fs = store_of(tmp / "fs", Xtr, ytr)
    m = StreamingLogisticRegression().fit(fs)
    # Today's defaults predicted a single class here (accuracy 0.371).
    assert set(np.unique(m.predict(Xte))) == {0, 1}
    assert (
        m.score(Xte, yte) >= LogisticRegression(max_iter=5000).fit(Xtr, ytr).score(Xte, yte) - 0.01
    )
    # The scaling is the store's exact statistics, folded into coef_/intercept_.
    np.testing.assert_allclose(m.mean_, Xtr.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m.scale_, Xtr.std(axis=0), rtol=1e-9)
    w, b = m.coef_[0], m.intercept_[0]
    z = ((Xte - m.mean_) / m.scale_) @ (w * m.scale_) + (b + m.mean_ @ w)
    np.testing.assert_allclose(m.decision_function(Xte), z, rtol=1e-3, atol=1e-3)
    assert 1 <= m.n_iter_ <= m.epochs


def test_store_and_array_fits_agree_and_the_step_ignores_the_batch_size(tmp):
    X, y = load_breast_cancer(return_X_y=True)
    X = X.astype(np.float32)
    fs = store_of(tmp / "fs", X, y, dtype=np.float32)
    kw = {"epochs": 5, "tol": None}
    a = StreamingLogisticRegression(**kw).fit(fs)
    b = StreamingLogisticRegression(**kw).fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    # reduction="mean" (the default): batch 4096 trains, where "sum" diverged.
    big = StreamingLogisticRegression(batch_size=4096).fit(fs)
    assert big.score(X, y) > 0.9


# ----- defect 6: labels and inputs are validated ------------------------------------


def test_any_two_label_values_become_classes(tmp):
    X, y01 = load_breast_cancer(return_X_y=True)
    ref = StreamingLogisticRegression().fit(X, y01)
    for lo, hi in [(1, 2), (-1, 1), ("benign", "malignant"), (False, True)]:
        y = np.where(y01 == 1, hi, lo)
        m = StreamingLogisticRegression().fit(X, y)
        assert list(m.classes_) == [lo, hi]
        assert set(np.unique(m.predict(X))) == {lo, hi}
        assert np.array_equal(m.coef_, ref.coef_)  # the same problem
        assert m.loss(X, y) == pytest.approx(ref.loss(X, y01)) and m.loss(X, y) > 0
        assert m.score(X, y) == ref.score(X, y01)
    fs = store_of(tmp / "fs", X, np.where(y01 == 1, 2, 1))
    m = StreamingLogisticRegression().fit(fs)
    assert list(m.classes_) == [1, 2] and m.loss(fs) > 0 and m.score(fs) > 0.95


def test_bad_labels_and_features_raise(tmp):
    X, y = load_breast_cancer(return_X_y=True)
    m = StreamingLogisticRegression()
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        m.fit(X, np.arange(len(y)) / 7)
    with pytest.raises(ValueError, match="1 class"):
        m.fit(X, np.zeros(len(y)))
    bad = y.astype(float)
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.fit(X, bad)
    Xn = X.copy()
    Xn[5, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.fit(Xn, y)
    Xn[5, 2] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        m.fit(Xn, y)
    with pytest.raises(ValueError, match="NaN or infinity"):
        m.fit(store_of(tmp / "nanx", Xn, y))
    with pytest.raises(ValueError, match="NaN or infinity"):
        m.fit(store_of(tmp / "nany", X, bad))
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        m.fit(store_of(tmp / "cont", X, np.arange(len(y)) / 7))
    # Three classes were refused before (issue 38, gap 7): now the multinomial model.
    assert list(m.fit(store_of(tmp / "three", X, np.arange(len(y)) % 3)).classes_) == [0, 1, 2]
    assert m.partial_fit(X, y, classes=[0, 1, 2]).coef_.shape == (3, X.shape[1])
    with pytest.raises(ValueError, match="classes must be passed"):
        StreamingLogisticRegression().partial_fit(X, y)
    with pytest.raises(ValueError, match="outside classes_"):
        StreamingLogisticRegression().partial_fit(X, y + 1, classes=[0, 1])


def test_one_row_and_hyperparameters_like_sklearn():
    X, y = load_breast_cancer(return_X_y=True)
    m = StreamingLogisticRegression().fit(X, y)
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        m.predict_proba(X[0])
    assert m.predict_proba(X[:1]).shape == (1, 2)
    with pytest.raises(ValueError, match="X has 3 features, but StreamingLogisticRegression"):
        m.predict(X[:, :3])
    for bad in [
        {"lr": float("nan")},
        {"lr": 0},
        {"l2": -1},
        {"epochs": 1.5},
        {"epochs": 0},
        {"batch_size": 0},
        {"tol": -1},
        {"reduction": "max"},
        {"schedule": "cosine"},
        {"shuffle": "yes"},
    ]:
        (k,) = bad
        with pytest.raises(ValueError, match=k):
            StreamingLogisticRegression(**bad).fit(X, y)
    with pytest.raises(ValueError, match="invalid parameter"):
        m.set_params(alpha=1)


# ----- the estimator protocol --------------------------------------------------------


def test_partial_fit_clone_pipeline_and_grid_search():
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = split(X, y)
    m = StreamingLogisticRegression(lr=0.1)
    for _ in range(20):
        for s in range(0, len(ytr), 100):
            m.partial_fit(Xtr[s : s + 100], ytr[s : s + 100], classes=[0, 1])
    assert m.score(Xte, yte) > 0.9 and list(m.classes_) == [0, 1]

    c = clone(m)
    assert c.get_params() == m.get_params() and not hasattr(c, "coef_")
    with pytest.raises(ValueError, match="not fitted"):
        c.predict(Xte)
    assert repr(StreamingLogisticRegression(lr=0.1)) == "StreamingLogisticRegression(lr=0.1)"

    pipe = make_pipeline(FunctionTransformer(np.log1p), StreamingLogisticRegression())
    assert pipe.fit(Xtr, ytr).score(Xte, yte) > 0.9
    grid = GridSearchCV(StreamingLogisticRegression(), {"l2": [0.0, 1e-2]}, cv=3).fit(Xtr, ytr)
    assert grid.best_estimator_.score(Xte, yte) > 0.9
    assert grid.predict_proba(Xte).shape == (len(yte), 2)


# Every applicable check passes (multiclass and class_weight included); the
# pandas and array-API checks skip themselves when those are not installed.
# scikit-learn warns that the class does not inherit BaseEstimator: it implements the
# protocol itself so that ``import mmapkit`` neither needs nor imports scikit-learn.
# One expected failure, as scikit-learn's own SGDClassifier has it: integer
# weights equal repeated rows only with one full batch (shuffled mini-batches
# visit a repeated row in other batches); tested so in
# test_integer_weights_equal_repeated_rows_on_a_full_batch.
def _expected_failures(estimator):
    return {
        "check_sample_weight_equivalence_on_dense_data": (
            "mini-batch SGD: a repeated row lands in other shuffled batches than its weight"
        )
    }


with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Estimator .* does not inherit", UserWarning)
    checks = parametrize_with_checks(
        [StreamingLogisticRegression()], expected_failed_checks=_expected_failures
    )


@checks
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


# ----- issue 38, gap 7: multiclass, sample_weight, class_weight, sklearn's shapes -----


def blobs(n_classes, n=1500, d=6, seed=0):
    from sklearn.datasets import make_classification

    return make_classification(
        n_samples=n,
        n_features=d,
        n_informative=d,
        n_redundant=0,
        n_classes=n_classes,
        n_clusters_per_class=1,
        class_sep=2.0,
        random_state=seed,
    )


@pytest.mark.parametrize("k", [3, 4, 5])
def test_multiclass_accuracy_close_to_sklearn(k):
    from sklearn.linear_model import SGDClassifier

    X, y = blobs(k, n=6000, d=8, seed=k)  # 1 point = 15 held-out rows
    Xtr, Xte, ytr, yte = split(X, y)
    m = StreamingLogisticRegression().fit(Xtr, ytr)
    ours = m.score(Xte, yte)
    lr = LogisticRegression(max_iter=5000).fit(Xtr, ytr).score(Xte, yte)
    sgd = SGDClassifier(loss="log_loss", random_state=0).fit(Xtr, ytr).score(Xte, yte)
    # Measured: within 0.4 points of LogisticRegression, ahead of SGDClassifier.
    assert ours >= lr - 0.01 and ours >= sgd - 0.005, (k, ours, lr, sgd)
    assert list(m.classes_) == list(range(k))
    p = m.predict_proba(Xte)
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
    assert np.array_equal(m.classes_[p.argmax(axis=1)], m.predict(Xte))
    np.testing.assert_allclose(np.exp(m.predict_log_proba(Xte)), p, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3])
def test_shapes_equal_sklearn_logistic_regression(k):
    X, y = blobs(k, n=300)
    labels = np.array(["ant", "bee", "cat"])[:k][y]  # any label values
    ours = StreamingLogisticRegression().fit(X, labels)
    ref = LogisticRegression(max_iter=5000).fit(X, labels)
    assert np.array_equal(ours.classes_, ref.classes_)
    for name in ("coef_", "intercept_"):
        assert getattr(ours, name).shape == getattr(ref, name).shape, name
    for name in ("predict_proba", "predict_log_proba", "decision_function", "predict"):
        assert getattr(ours, name)(X).shape == getattr(ref, name)(X).shape, name
    if k == 2:  # the binary convention: (1, d), (1,)
        assert ours.coef_.shape == (1, X.shape[1]) and ours.intercept_.shape == (1,)
    # coef_/intercept_ give the decision values on raw features.
    z = X @ ours.coef_.T.astype(np.float64) + ours.intercept_
    np.testing.assert_allclose(
        ours.decision_function(X), z.reshape(ours.decision_function(X).shape), rtol=1e-4, atol=1e-4
    )
    assert (ours.predict(X) == ref.predict(X)).mean() > 0.95


def test_multiclass_store_fit_equals_array_fit_pickles_and_partial_fits(tmp):
    X, y = blobs(4, n=2000)
    X = X.astype(np.float32)
    kw = {"epochs": 4, "tol": None}
    a = StreamingLogisticRegression(**kw).fit(store_of(tmp / "fs", X, y, dtype=np.float32))
    b = StreamingLogisticRegression(**kw).fit(X, y)
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    assert a.coef_.shape == (4, X.shape[1]) and a.intercept_.shape == (4,)
    back = pickle.loads(pickle.dumps(a))
    assert np.array_equal(back.predict_proba(X), a.predict_proba(X))
    m = StreamingLogisticRegression(lr=0.2)
    for _ in range(10):
        for s in range(0, 2000, 250):
            m.partial_fit(X[s : s + 250], y[s : s + 250], classes=[0, 1, 2, 3])
    assert m.score(X, y) > 0.9 and m.loss(X, y) < np.log(4)
    with pytest.raises(ValueError, match="differs from the classes_"):
        m.partial_fit(X, y, classes=[0, 1, 2])


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("standardize", [False, True])
def test_integer_weights_equal_repeated_rows_on_a_full_batch(k, standardize):
    X, y = blobs(k, n=200)
    sw = np.random.default_rng(1).integers(0, 4, size=len(y))
    rep = np.repeat(np.arange(len(y)), sw)
    kw = {"batch_size": 10_000, "shuffle": False, "tol": None, "epochs": 30}
    kw |= {"standardize": standardize, "l2": 1e-3}
    a = StreamingLogisticRegression(**kw).fit(X, y, sample_weight=sw)
    b = StreamingLogisticRegression(**kw).fit(X[rep], y[rep])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=2e-4, atol=2e-5)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=2e-4, atol=2e-5)
    if standardize:  # the weighted mean and standard deviation
        np.testing.assert_allclose(a.mean_, X[rep].mean(axis=0), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(a.scale_, X[rep].std(axis=0), rtol=1e-10)


@pytest.mark.parametrize("k", [2, 3])
def test_zero_weight_rows_have_no_effect(tmp, k):
    X, y = blobs(k, n=600)
    rng = np.random.default_rng(2)
    zero = rng.random(len(y)) < 0.3
    sw = np.where(zero, 0.0, 1.0)
    Xz = X.copy()
    Xz[zero] *= 100  # outliers of weight 0
    # Arrays, the default shuffled mini-batches: exactly the fit without those rows.
    a = StreamingLogisticRegression().fit(Xz, y, sample_weight=sw)
    b = StreamingLogisticRegression().fit(X[~zero], y[~zero])
    assert np.array_equal(a.coef_, b.coef_) and np.array_equal(a.intercept_, b.intercept_)
    assert a.n_iter_ == b.n_iter_
    # A store keeps the rows in their batches, with no gradient: on one batch the same fit.
    kw = {"batch_size": 10_000, "shuffle": False, "tol": None, "epochs": 20}
    fs = store_of(tmp / "fs", Xz, y)
    c = StreamingLogisticRegression(**kw).fit(fs, sample_weight=sw)
    d = StreamingLogisticRegression(**kw).fit(X[~zero], y[~zero])
    np.testing.assert_allclose(c.coef_, d.coef_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(c.mean_, d.mean_, rtol=1e-10)


def test_class_weight_balanced_equals_the_explicit_weights(tmp):
    X, y = blobs(3, n=900)
    keep = (y != 2) | (np.arange(len(y)) % 4 == 0)  # class 2 rare
    X, y = X[keep], y[keep]
    counts = np.bincount(y)
    cw = len(y) / (3 * counts)  # scikit-learn's formula
    bal = StreamingLogisticRegression(class_weight="balanced").fit(X, y)
    explicit = StreamingLogisticRegression().fit(X, y, sample_weight=cw[y])
    as_dict = StreamingLogisticRegression(class_weight=dict(enumerate(cw))).fit(X, y)
    for other in (explicit, as_dict):
        assert np.array_equal(bal.coef_, other.coef_) and np.array_equal(
            bal.intercept_, other.intercept_
        )
    unweighted = StreamingLogisticRegression().fit(X, y)
    assert not np.array_equal(bal.coef_, unweighted.coef_)
    # A store: 'balanced' from one pass over its labels, the weights gathered with
    # its shuffled rows (and from a .npy file of them): the array fit's weights.
    Xf = X.astype(np.float32)
    kw = {"epochs": 3, "tol": None}
    fs = store_of(tmp / "fs", Xf, y, dtype=np.float32)
    s_bal = StreamingLogisticRegression(class_weight="balanced", **kw).fit(fs)
    a_bal = StreamingLogisticRegression(class_weight="balanced", **kw).fit(Xf, y)
    np.testing.assert_allclose(s_bal.coef_, a_bal.coef_, rtol=1e-5, atol=1e-6)
    np.save(tmp / "w.npy", cw[y])
    s_sw = StreamingLogisticRegression(**kw).fit(fs, sample_weight=str(tmp / "w.npy"))
    np.testing.assert_allclose(s_sw.coef_, a_bal.coef_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s_sw.mean_, a_bal.mean_, rtol=1e-10)


def test_weight_errors():
    X, y = blobs(3, n=100)
    m = StreamingLogisticRegression()
    with pytest.raises(ValueError, match="Negative"):
        m.fit(X, y, sample_weight=-np.ones(len(y)))
    with pytest.raises(ValueError, match=r"sample_weight\.shape"):
        m.fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        m.fit(X, y, sample_weight=np.full(len(y), np.nan))
    with pytest.raises(ValueError, match="zero"):
        m.fit(X, y, sample_weight=np.zeros(len(y)))
    with pytest.raises(ValueError, match="Class label 7 not present"):
        StreamingLogisticRegression(class_weight={7: 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="class_weight must be"):
        StreamingLogisticRegression(class_weight="auto").fit(X, y)
    with pytest.raises(ValueError, match="not supported for partial_fit"):
        StreamingLogisticRegression(class_weight="balanced").partial_fit(X, y, classes=[0, 1, 2])
    # Uniform weights are the unweighted fit, exactly.
    assert np.array_equal(m.fit(X, y, sample_weight=np.full(len(y), 3.0)).coef_, m.fit(X, y).coef_)
