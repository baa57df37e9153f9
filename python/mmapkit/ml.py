"""Out-of-core training on a :class:`~mmapkit.FeatureStore`:
:class:`StreamingLogisticRegression`, a scikit-learn estimator.

Binary logistic regression by mini-batch gradient descent with L2
regularisation, in ``float32`` numpy (the matrix products go to BLAS). For
a batch ``X`` (m × d, standardised: see below) with labels ``y`` in {0, 1}
(``classes_[1]`` is 1), with ``λ = l2`` and ``η`` the epoch's rate::

    p  = σ(X·w + b)                 σ(z) = 1/(1 + e^-z)
    gw = Xᵀ(p − y) / s + 2λ·w
    gb = Σ(p − y)  / s + 2λ·b
    w ← w − η·gw
    b ← b − η·gb

with ``s = m`` for ``reduction="mean"`` (the default: per-example average,
a learning rate that does not depend on the batch size) and ``s = 1`` for
``reduction="sum"`` (the update rule of the article this module follows).
Weights start at zero, so a fit is deterministic for a fixed
``random_state`` (the default, 0) or with ``shuffle=False``.

Defaults that work on raw data: ``standardize=True`` trains on
``(x − μ)/σ`` with the exact per-column mean and standard deviation of the
training rows (for a store, its ``describe()``: one streaming pass), and
folds the scaling into ``coef_``/``intercept_`` afterwards, so the model
predicts from raw features and needs no separate scaler; ``lr=0.5`` decayed
as ``lr/√(1 + epoch)``; up to ``epochs=100`` shuffled passes of batches of
64, stopping when the progressive log loss stops improving by ``tol=1e-4``;
``l2=1e-4``. On raw
``load_breast_cancer``, binary ``load_digits`` and binary ``load_wine``
this is within 1 point of ``LogisticRegression(max_iter=5000)``'s held-out
accuracy (``python -m bench.ml_accuracy``; tested in
``tests/python/test_ml_estimator.py``).

The article's rule on raw features, one pass, as before this model had
defaults of its own: ``StreamingLogisticRegression(lr=0.01, reduction="sum",
schedule="constant", standardize=False, epochs=1, tol=None, l2=0,
shuffle=False)``.

The scikit-learn protocol (``get_params``/``set_params``, ``clone``,
``fit(X, y)``, ``partial_fit(X, y, classes=)``, ``predict``,
``predict_proba``, ``decision_function``, ``score``; ``Pipeline``,
``GridSearchCV``, pickling; every applicable ``check_estimator`` check) is
implemented here, not inherited, so ``import mmapkit`` neither needs nor
imports scikit-learn.

Speed: one update is eight numpy calls (nine with L2; BLAS for the two
products) on preallocated buffers, about 6 µs of CPU for ``d = 64``, batch
64 (about 10 M rows per CPU-second from a store in the page cache;
``python -m bench features``). Standardising costs two vectorised calls per
group of about 1 MiB of rows, not per batch (about +12 % CPU per epoch at
d = 64), and the progressive loss one matrix-vector product per group
(+3-8 %); a store fit also makes one pass over the labels and one
``describe()`` pass (at d = 64 about 0.45 CPU-s per million rows, about four
epochs' worth) before the first epoch.
"""

from __future__ import annotations

import math
import numbers
import sys
import time
import warnings
from typing import Any, TextIO

import numpy as np
import numpy.typing as npt

from . import _columns
from .features import batch_order

__all__ = ["StreamingLogisticRegression", "sigmoid"]


def sigmoid(z: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """The logistic function ``1 / (1 + e^-z)`` in ``z``'s dtype, computed
    through ``e^-|z|`` (``e^z / (1 + e^z)`` for negative ``z``): no
    overflow for large ``|z|`` and full relative precision in both tails."""
    z = np.asarray(z)
    e = np.exp(-np.abs(z))
    d = e + 1
    return np.where(z >= 0, 1 / d, e / d)  # type: ignore[no-any-return]


class _Progress:
    """A one-line progress bar on a terminal (stderr), or nothing."""

    def __init__(self, enabled: bool | None, total: int, stream: TextIO | None = None) -> None:
        stream = sys.stderr if stream is None else stream
        self.on = (stream.isatty() if enabled is None else enabled) and total > 0
        self.total, self.done, self.stream = total, 0, stream
        self.t0 = self.last = time.monotonic()

    def step(self, rows: int, label: str) -> None:
        if not self.on:
            return
        self.done += rows
        now = time.monotonic()
        if now - self.last < 0.2 and self.done < self.total:
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        frac = self.done / self.total
        bar = "#" * int(frac * 30)
        self.stream.write(f"\r{label} [{bar:<30}] {frac:6.1%} {rate:,.0f} rows/s")
        self.stream.flush()

    def end(self) -> None:
        if self.on:
            self.stream.write("\n")
            self.stream.flush()


class _Kernel:
    """The update step for one learning rate, on preallocated buffers.

    With ``θ = (w/2, b/2)``, ``u = X·(w/2) + b/2 = (X·w + b)/2`` and
    ``y2 = 2y − 1``: ``σ(2u) − y = ½(tanh(u) − y2)``, so the rule's
    ``w ← c·w − η'·Xᵀ(σ − y)``, ``b ← c·b − η'·Σ(σ − y)`` (``c = 1 − 2ηλ``,
    ``η' = η/s``) is ``θ ← c·θ − (η'/4)·(Xᵀr, Σr)`` with
    ``r = tanh(u) − y2``. ``tanh`` cannot overflow and ``σ − y`` keeps an
    absolute error below 1e-7 in ``float32``. Eight numpy calls per step
    (nine with L2) into preallocated buffers, operands of the output's shape
    where possible: at 64 rows a call's overhead is most of its cost, and
    a Python-float operand costs about twice an array's (measured: 0.76 vs
    0.36 µs per ufunc call at 64 elements).
    """

    def __init__(self, theta: npt.NDArray[np.float32], lr: float, l2: float, mean: bool) -> None:
        self.lr = lr
        d = theta.shape[0] - 1
        h, hb = theta[:d], theta[d:].reshape(())  # views: updated in place with θ
        g = np.empty(d + 1, dtype=np.float32)
        gw, gb = g[:d], g[d:].reshape(())
        shrink = np.full(d + 1, 1 - 2 * lr * l2, dtype=np.float32) if l2 else None
        bufs: dict[int, tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = {}
        dot, add, tanh, sub, mul, addsum = (
            np.dot,
            np.add,
            np.tanh,
            np.subtract,
            np.multiply,
            np.add.reduce,
        )

        def step(X: npt.NDArray[np.float32], y2: npt.NDArray[np.float32]) -> None:
            m = X.shape[0]
            b = bufs.get(m)
            if b is None:
                if len(bufs) > 8:  # partial_fit with many batch sizes
                    bufs.clear()
                k = np.float32(lr / (m if mean else 1)) * np.float32(0.25)
                b = bufs[m] = (np.empty(m, dtype=np.float32), np.full(m, k, dtype=np.float32))
            z, kv = b
            dot(X, h, out=z)
            add(z, hb, out=z)
            tanh(z, out=z)
            sub(z, y2, out=z)
            mul(z, kv, out=z)
            dot(z, X, out=gw)
            addsum(z, out=gb)
            if shrink is not None:
                mul(theta, shrink, out=theta)
            sub(theta, g, out=theta)

        # A local function (not stored on the model, which pickles).
        self.step = step


_PARAMS = (
    "l2",
    "lr",
    "schedule",
    "epochs",
    "tol",
    "batch_size",
    "shuffle",
    "standardize",
    "reduction",
    "random_state",
    "progress",
)


class StreamingLogisticRegression:
    """Binary logistic regression trained out of core, a scikit-learn
    estimator; see the module docs for the update rule and the defaults.

    Hyperparameters (keyword-only; checked by :meth:`fit` and
    :meth:`partial_fit`, which raise :class:`ValueError` for invalid ones):

    - ``l2`` (λ ≥ 0, default 1e-4): L2 penalty on the weights and bias.
    - ``lr`` (η > 0, default 0.5): the learning rate of the first epoch.
    - ``schedule`` (``"invsqrt"``, default, or ``"constant"``): epoch ``e``
      (from 0) uses ``η / √(1 + e)``, or ``η`` throughout.
    - ``epochs`` (int ≥ 1, default 100): the most passes :meth:`fit` makes.
    - ``tol`` (≥ 0 or None, default 1e-4): :meth:`fit` stops after 5
      consecutive epochs whose progressive log loss (each group of rows
      scored before training on it: no extra pass) did not beat the best
      so far by ``tol`` (scikit-learn's ``SGDClassifier`` rule); None runs
      all ``epochs``.
    - ``batch_size`` (int ≥ 1, default 64): rows per update.
    - ``shuffle`` (default True) and ``random_state`` (anything
      ``np.random.default_rng`` takes; None: fresh entropy): epoch ``e``
      uses :func:`~mmapkit.features.batch_order` with seed
      ``np.random.SeedSequence(random_state).spawn(epochs)[e]``, so equal
      integer seeds give equal weights, on an array and on a store with
      the same rows alike.
    - ``standardize`` (default True): train on ``(x − μ)/σ`` with the
      exact per-column mean and standard deviation of the training rows
      (one streaming pass over a store, columns with σ = 0 unscaled), and
      fold the scaling into ``coef_``/``intercept_``, so predictions take
      raw features and need no separate scaler.
    - ``reduction`` (``"mean"``, default, or ``"sum"``): per-example
      average gradient (a learning rate independent of the batch size) or
      the summed batch gradient of the article this module follows.
    - ``progress`` (None: on a terminal): a progress bar on stderr.

    Fitted attributes: ``classes_`` (the two label values, sorted; labels
    equal to ``classes_[1]`` are the positive class), ``coef_`` (``float32``,
    shape ``(d,)``, for raw features), ``intercept_`` (``float32``),
    ``n_features_in_``, ``mean_`` and ``scale_`` (the standardisation;
    None with ``standardize=False``), ``n_iter_`` (epochs run by the last
    :meth:`fit`) and ``n_steps_`` (updates made).
    """

    # Fitted attributes (set by fit/partial_fit, never by __init__).
    classes_: npt.NDArray[Any]
    n_features_in_: int
    mean_: npt.NDArray[np.float64] | None
    scale_: npt.NDArray[np.float64] | None
    n_iter_: int
    n_steps_: int
    _theta: npt.NDArray[np.float32]

    def __init__(
        self,
        *,
        l2: float = 1e-4,
        lr: float = 0.5,
        schedule: str = "invsqrt",
        epochs: int = 100,
        tol: float | None = 1e-4,
        batch_size: int = 64,
        shuffle: bool = True,
        standardize: bool = True,
        reduction: str = "mean",
        random_state: Any = 0,
        progress: bool | None = None,
    ) -> None:
        self.l2 = l2
        self.lr = lr
        self.schedule = schedule
        self.epochs = epochs
        self.tol = tol
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.standardize = standardize
        self.reduction = reduction
        self.random_state = random_state
        self.progress = progress

    # ----- the scikit-learn estimator protocol ----------------------------

    def get_params(self, deep: bool = True) -> dict[str, Any]:  # noqa: ARG002
        """The hyperparameters by name (``deep``: scikit-learn's signature; no
        sub-estimators)."""
        return {k: getattr(self, k) for k in _PARAMS}

    def set_params(self, **params: Any) -> StreamingLogisticRegression:
        """Sets hyperparameters by name (validated at the next fit)."""
        for k, v in params.items():
            if k not in _PARAMS:
                raise ValueError(
                    f"invalid parameter {k!r} for StreamingLogisticRegression; "
                    f"valid: {', '.join(_PARAMS)}"
                )
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        default = type(self)().get_params()
        changed = ", ".join(
            f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, default[k])
        )
        return f"StreamingLogisticRegression({changed})"

    def __sklearn_tags__(self) -> Any:
        # scikit-learn is optional: imported only when it asks for the tags.
        from sklearn.utils import (  # type: ignore[import-untyped,unused-ignore]
            ClassifierTags,
            InputTags,
            Tags,
            TargetTags,
        )

        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True),
            classifier_tags=ClassifierTags(multi_class=False),
            input_tags=InputTags(allow_nan=False, sparse=False),
        )

    def _checked_params(self) -> dict[str, Any]:
        """The hyperparameters, validated (ValueError naming the bad one)."""
        p = self.get_params()

        def real(name: str, lo: float, strict: bool) -> None:
            v = p[name]
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            if not ok or (v <= lo if strict else v < lo):
                rel = ">" if strict else ">="
                raise ValueError(f"{name} must be a finite real {rel} {lo}, got {v!r}")

        def integer(name: str) -> None:
            v = p[name]
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")

        real("l2", 0, strict=False)
        real("lr", 0, strict=True)
        if p["tol"] is not None:
            real("tol", 0, strict=False)
        integer("epochs")
        integer("batch_size")
        for name, allowed in (
            ("schedule", ("invsqrt", "constant")),
            ("reduction", ("mean", "sum")),
        ):
            if p[name] not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {p[name]!r}")
        for name in ("shuffle", "standardize"):
            if not isinstance(p[name], (bool, np.bool_)):
                raise ValueError(f"{name} must be a bool, got {p[name]!r}")
        if p["progress"] is not None and not isinstance(p["progress"], (bool, np.bool_)):
            raise ValueError(f"progress must be a bool or None, got {p['progress']!r}")
        return p

    # ----- parameters -----------------------------------------------------

    # θ = (v/2, c/2) in one buffer, (v, c) the weights and bias for the
    # standardised features: the kernel's tanh form needs (x·v + c)/2, which
    # x·(v/2) + c/2 gives with no extra scaling call (halving is exact), and
    # the L2 shrink and the update are then one call each for both.

    def _folded(self) -> tuple[npt.NDArray[np.float32], np.float32]:
        """``(w, b)`` for raw features: ``w = v/σ``, ``b = c − μ·w``."""
        theta = self._need_fit()
        v = theta[:-1].astype(np.float64) * 2
        c = float(theta[-1]) * 2
        if self.mean_ is not None and self.scale_ is not None:
            v = v / self.scale_
            c -= float(np.dot(self.mean_, v))
        return v.astype(np.float32), np.float32(c)

    @property
    def coef_(self) -> npt.NDArray[np.float32]:
        """The weights ``w`` for raw features (a fresh ``float32`` array)."""
        return self._folded()[0]

    @property
    def intercept_(self) -> np.float32:
        """The bias ``b`` for raw features (``float32``)."""
        return self._folded()[1]

    def _need_fit(self) -> npt.NDArray[np.float32]:
        theta: npt.NDArray[np.float32] | None = self.__dict__.get("_theta")
        if theta is None:
            msg = "this StreamingLogisticRegression is not fitted yet: call fit or partial_fit"
            try:
                from sklearn.exceptions import (  # type: ignore[import-untyped,unused-ignore]
                    NotFittedError,
                )
            except ImportError:
                raise ValueError(msg) from None
            raise NotFittedError(msg)
        return theta

    def _start(self, d: int, stats: dict[str, Any] | None, classes: npt.NDArray[Any]) -> None:
        """Zero parameters for ``d`` features; ``stats`` (``describe()``'s
        dict) gives the standardisation."""
        self._theta = np.zeros(d + 1, dtype=np.float32)
        self.classes_ = classes
        self.n_features_in_ = d
        self.n_steps_ = 0
        self.n_iter_ = 0
        if stats is None:
            self.mean_ = self.scale_ = None
        else:
            scale = np.asarray(stats["std"], dtype=np.float64)
            self.mean_ = np.asarray(stats["mean"], dtype=np.float64)
            self.scale_ = np.where(scale > 0, scale, 1.0)

    # ----- training -------------------------------------------------------

    def _train(
        self,
        groups: Any,
        lr: float,
        p: dict[str, Any],
        bar: _Progress | None = None,
        label: str = "",
        track_loss: bool = False,
    ) -> float:
        """One update per batch of each group ``(X, y, batch_size)``:
        consecutive batches of ``batch_size`` rows (the last may be short).
        Per-group work (labels to ±1, standardising into a reused buffer)
        is a few vectorised calls per group; see :class:`_Kernel` for the
        step. With ``track_loss``, returns the progressive log loss: each
        group's mean loss under the parameters before training on it (one
        matrix-vector product per group), summed over the rows; else 0."""
        theta = self._need_fit()
        step = _Kernel(theta, lr, float(p["l2"]), p["reduction"] == "mean").step
        pos = self.classes_[1]
        unit = bool(self.classes_[0] == 0 and pos == 1)
        mu: npt.NDArray[np.float32] | None = None
        inv = mu
        if self.mean_ is not None and self.scale_ is not None:
            mu = self.mean_.astype(np.float32)
            inv = (1 / self.scale_).astype(np.float32)
        buf = np.empty(0, dtype=np.float32)
        loss = 0.0
        for X_in, y, bs in groups:
            m = X_in.shape[0]
            if mu is None or inv is None:
                X = X_in.astype(np.float32, copy=False)
            else:
                if buf.size < X_in.size:
                    buf = np.empty(X_in.size, dtype=np.float32)
                X = buf[: X_in.size].reshape(X_in.shape)
                np.subtract(X_in, mu, out=X, casting="unsafe")
                np.multiply(X, inv, out=X)
            if unit:  # labels 0/1 (the common case): 2y − 1 in two calls
                y2 = np.multiply(y, 2, dtype=np.float32)
            else:
                y2 = np.equal(y, pos).astype(np.float32)
                y2 *= 2
            y2 -= 1
            if track_loss:  # z/2 = x·θ_w + θ_b; loss = log(1 + e^(−y2·z))
                u = X @ theta[:-1]
                u += theta[-1]
                u *= y2
                u *= -2
                loss += float(np.sum(np.logaddexp(0, u), dtype=np.float64))
            for s in range(0, m, bs):
                step(X[s : s + bs], y2[s : s + bs])
            self.n_steps_ += -(-m // bs)
            if bar is not None:
                bar.step(m, label)
        return loss

    def fit(
        self,
        X: Any,
        y: npt.ArrayLike | None = None,
        *,
        drop_last: bool = False,
        prefetch: int = 2,
    ) -> StreamingLogisticRegression:
        """Train from zero weights on ``(X, y)`` (arrays, like scikit-learn)
        or on a store passed as ``X`` with ``y=None`` (a
        :class:`~mmapkit.FeatureStore`, or anything with ``dim``, ``len()``
        and ``batches()``; its labels and, with ``standardize``, its
        features are read in one streaming pass each before the epochs).

        At most ``epochs`` passes, one update per batch, stopping early at
        the tolerance (see the class docs). The labels must hold exactly
        two values (any two: they become ``classes_``); NaN or infinity in
        the labels or the features raise :class:`ValueError`.
        ``drop_last`` and ``prefetch`` are passed to the store's
        ``batches``."""
        p = self._checked_params()
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if y is None and hasattr(X, "batches") and hasattr(X, "dim"):
            store = X
            d = int(store.dim)
            n = len(store)
            classes = _classes(_label_chunks(store), "the store's labels")
            stats = _describe_store(store) if p["standardize"] else None
            groups = getattr(store, "_batch_groups", None)
            if groups is None:

                def groups(bs: int, **kw: Any) -> Any:
                    return (
                        (np.asarray(Xb), np.asarray(yb), len(yb))
                        for Xb, yb in store.batches(bs, **kw)
                        if len(yb)
                    )
        else:
            if y is None:
                raise ValueError(
                    "StreamingLogisticRegression requires y to be passed, but the target y "
                    "is None: fit(X, y) with arrays, or fit(store) with a FeatureStore"
                )
            Xa, ya = self._check_xy(X, y, fitted=False)
            d, n = Xa.shape[1], Xa.shape[0]
            classes = _classes([ya], "y")
            stats = _columns.describe(Xa) if p["standardize"] else None

            def groups(bs: int, *, shuffle: bool, seed: Any, **_: Any) -> Any:
                return _array_groups(Xa, ya, bs, shuffle, seed, drop_last)

        self._start(d, stats, classes)
        epochs = int(p["epochs"])
        seeds: list[Any] = (
            list(np.random.SeedSequence(_entropy(p["random_state"])).spawn(epochs))
            if p["shuffle"]
            else [None] * epochs
        )
        bar = _Progress(p["progress"], epochs * n)
        tol = p["tol"]
        best, stale = math.inf, 0
        try:
            for e in range(epochs):
                lr = p["lr"] if p["schedule"] == "constant" else p["lr"] / math.sqrt(1 + e)
                it = groups(
                    p["batch_size"],
                    shuffle=bool(p["shuffle"]),
                    seed=seeds[e],
                    drop_last=drop_last,
                    prefetch=prefetch,
                )
                loss = self._train(
                    it, lr, p, bar if bar.on else None, f"epoch {e + 1}/{epochs}", tol is not None
                )
                self.n_iter_ = e + 1
                if not np.all(np.isfinite(self._theta)):
                    raise ValueError(
                        "training diverged (non-finite weights): the features hold NaN or "
                        "infinity, or the learning rate is too large for unscaled features "
                        "(use standardize=True or a smaller lr)"
                    )
                if tol is not None:  # scikit-learn's SGD rule, on the progressive loss
                    loss /= max(n, 1)
                    stale = stale + 1 if loss > best - tol else 0
                    best = min(best, loss)
                    if stale >= _NO_CHANGE:
                        break
        finally:
            bar.end()
        return self

    def partial_fit(
        self,
        X: npt.ArrayLike,
        y: npt.ArrayLike,
        classes: npt.ArrayLike | None = None,
    ) -> StreamingLogisticRegression:
        """One update per ``batch_size`` rows of ``(X, y)`` at the constant
        learning rate ``lr``. The first call (on an unfitted model) needs
        ``classes`` (the two label values, as in scikit-learn) and takes the
        standardisation from its batch's statistics (with
        ``standardize=True``); later calls, and calls after :meth:`fit`,
        continue with the same ``classes_`` and standardisation."""
        p = self._checked_params()
        first = self.__dict__.get("_theta") is None
        Xa, ya = self._check_xy(X, y, fitted=not first)
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
            cl = _classes([np.asarray(classes)], "classes")
            stats = _columns.describe(Xa) if p["standardize"] and Xa.shape[0] else None
            self._start(Xa.shape[1], stats, cl)
        elif classes is not None and not np.array_equal(
            np.unique(np.asarray(classes)), self.classes_
        ):
            raise ValueError(
                f"classes={classes!r} differs from the classes_ of the earlier fit "
                f"({self.classes_!r})"
            )
        unknown = ~np.isin(ya, self.classes_)
        if np.any(unknown):
            raise ValueError(
                f"y holds labels outside classes_ {self.classes_.tolist()}: "
                f"{np.unique(ya[unknown])[:5].tolist()}"
            )
        if Xa.shape[0]:
            self._train([(Xa, ya, int(p["batch_size"]))], float(p["lr"]), p)
        return self

    # ----- validation -----------------------------------------------------

    def _check_x(self, X: Any, fitted: bool = True) -> npt.NDArray[Any]:
        """``X`` as a finite 2-D numeric array (scikit-learn's messages)."""
        if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
            raise TypeError(
                "A sparse matrix was passed, but dense data is required: use X.toarray()"
            )
        Xa = np.asarray(X)
        if Xa.dtype.kind in "OUS":
            try:
                Xa = Xa.astype(np.float64)  # a TypeError (e.g. a dict) goes up as is
            except ValueError as e:
                raise ValueError(f"X must be numeric: {e}") from None
        if Xa.dtype.kind == "c":
            raise ValueError("Complex data not supported")
        if Xa.dtype.kind not in "biuf":
            raise ValueError(f"X must be numeric, got dtype {Xa.dtype}")
        if Xa.ndim != 2:
            what = "scalar array" if Xa.ndim == 0 else f"{Xa.ndim}D array"
            raise ValueError(
                f"Expected 2D array, got {what} instead. Reshape your data either using "
                "array.reshape(-1, 1) if your data has a single feature or "
                "array.reshape(1, -1) if it contains a single sample."
            )
        if Xa.shape[0] == 0:
            raise ValueError(
                f"Found array with 0 sample(s) (shape={Xa.shape}) while a minimum of 1 is required."
            )
        if Xa.shape[1] == 0:
            raise ValueError(
                f"Found array with 0 feature(s) (shape={Xa.shape}) while a minimum of 1 is "
                "required."
            )
        if Xa.dtype.kind == "f" and not np.all(np.isfinite(Xa)):
            bad = "NaN" if np.isnan(Xa).any() else "infinity"
            raise ValueError(f"Input X contains {bad}.")
        if fitted:
            d = self.n_features_in_
            if Xa.shape[1] != d:
                raise ValueError(
                    f"X has {Xa.shape[1]} features, but StreamingLogisticRegression is "
                    f"expecting {d} features as input."
                )
        return Xa

    def _check_xy(self, X: Any, y: Any, fitted: bool) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        Xa = self._check_x(X, fitted)
        ya = np.asarray(y)
        if ya.ndim == 2 and ya.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change "
                "the shape of y to (n_samples,), for example using ravel().",
                _data_conversion_warning(),
                stacklevel=3,
            )
            ya = ya.reshape(-1)
        if ya.shape != (Xa.shape[0],):
            raise ValueError(f"y must have shape ({Xa.shape[0]},), got {ya.shape}")
        if ya.dtype.kind == "f" and not np.all(np.isfinite(ya)):
            raise ValueError("Input y contains NaN or infinity.")
        return Xa, ya

    # ----- prediction -----------------------------------------------------

    def decision_function(self, X: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """``X·w + b`` per row (``float32``): positive for ``classes_[1]``.

        Each row's sum is taken alone, in ``float64``, so a row's value does
        not depend on where it is in ``X`` (a BLAS matrix-vector product
        rounds rows differently by their position: scikit-learn's
        sample-order check failed with OpenBLAS 0.3.31 by one ``float32``
        ulp)."""
        w, b = self._folded()
        Xa = self._check_x(X)
        z: npt.NDArray[np.float64] = np.einsum(
            "ij,j->i", Xa, w.astype(np.float64), dtype=np.float64, casting="safe"
        )
        return (z + float(b)).astype(np.float32)

    def predict_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """``[P(classes_[0]), P(classes_[1])]`` per row, shape ``(m, 2)``."""
        p = sigmoid(self.decision_function(X))
        return np.stack([1 - p, p], axis=1)

    def predict_log_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The log of :meth:`predict_proba`, computed stably."""
        z = self.decision_function(X).astype(np.float64)
        return np.stack([-np.logaddexp(0, z), -np.logaddexp(0, -z)], axis=1)

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[Any]:
        """``classes_[1]`` where the decision value is > 0, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0  # raises first when not fitted
        return self.classes_[positive.astype(np.intp)]

    def _batches(self, data: Any, y: Any, batch_size: int) -> Any:
        if y is not None:
            X, ya = self._check_xy(data, y, fitted=True)
            return (
                (X[s : s + batch_size], ya[s : s + batch_size])
                for s in range(0, X.shape[0], batch_size)
            )
        return data.batches(batch_size)

    def score(
        self,
        X: Any,
        y: npt.ArrayLike | None = None,
        sample_weight: npt.ArrayLike | None = None,
        *,
        batch_size: int = 65536,
    ) -> float:
        """Accuracy on ``(X, y)`` or on a store (one streaming pass);
        ``sample_weight`` (arrays only) weights the rows as in
        scikit-learn's ``accuracy_score``."""
        self._need_fit()
        if sample_weight is not None:
            if y is None:
                raise ValueError("sample_weight needs arrays: score(X, y, sample_weight)")
            sw = np.asarray(sample_weight, dtype=np.float64)
            right = self.predict(X) == np.asarray(y)
            return float(np.sum(sw * right) / np.sum(sw))
        right = total = 0
        for Xb, yb in self._batches(X, y, batch_size):
            right += int(np.count_nonzero(self.predict(Xb) == np.asarray(yb)))
            total += Xb.shape[0]
        return right / total if total else float("nan")

    def loss(self, data: Any, y: npt.ArrayLike | None = None, *, batch_size: int = 65536) -> float:
        """Mean log loss over a store (or ``(X, y)``) in one streaming pass,
        plus the penalty ``l2·(‖v‖² + c²)`` on the trained (standardised)
        parameters: ``mean(log(1 + e^z) − t·z) + λ‖θ‖²`` with ``t = 1`` for
        ``classes_[1]``, else 0 (computed stably, in ``float64``); labels
        outside ``classes_`` raise :class:`ValueError`."""
        theta = self._need_fit().astype(np.float64) * 2
        acc = 0.0
        total = 0
        for Xb, y_in in self._batches(data, y, batch_size):
            yb = np.asarray(y_in)
            if not np.all(np.isin(yb, self.classes_)):
                raise ValueError(f"labels outside classes_ {self.classes_.tolist()}")
            z = self.decision_function(Xb).astype(np.float64)
            acc += float(np.sum(np.logaddexp(0.0, z) - (yb == self.classes_[1]) * z))
            total += Xb.shape[0]
        reg = float(self.l2) * float(np.dot(theta, theta))
        return (acc / total if total else float("nan")) + reg


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except (TypeError, ValueError):
        return False


def _entropy(random_state: Any) -> Any:
    """``SeedSequence`` entropy from ``random_state`` (an int, None or a
    ``np.random.Generator``/``RandomState``, whose next draw is used)."""
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31))
    return random_state


def _classes(chunks: Any, what: str) -> npt.NDArray[Any]:
    """The sorted distinct values of the labels in ``chunks`` (exactly
    two), with min/max per chunk and one comparison pass (no sort of the
    whole label array). The errors use scikit-learn's wording ("Unknown
    label type", "Only binary classification is supported")."""
    lo = hi = None
    for chunk in chunks:
        c = np.asarray(chunk)
        if c.dtype.kind == "O":
            if not all(isinstance(v, str) for v in c.flat):
                raise ValueError(
                    f"Unknown label type: {what} is an object array not all strings; "
                    "pass numbers or strings"
                )
            c = c.astype(str)
        if c.dtype.kind not in "biufU":
            raise ValueError(f"Unknown label type: {what} has dtype {c.dtype}")
        if c.dtype.kind == "f" and not np.all(np.isfinite(c)):
            raise ValueError(f"{what} contain NaN or infinity")
        if c.size == 0:
            continue
        prev: list[Any] = [] if lo is None else [lo, hi]
        if c.dtype.kind == "U":  # strings: no min/max ufuncs
            found = np.unique(np.concatenate([prev, np.unique(c)]))
        else:
            a, b = c.min(), c.max()
            others = c[(c != a) & (c != b)][:10]
            found = np.unique(np.concatenate([[a, b], prev, others]))
        if found.size > 2:
            kind = "multiclass"
            if found.dtype.kind == "f" and np.any(found != np.round(found)):
                kind = "continuous (Unknown label type)"
            raise ValueError(
                f"Only binary classification is supported. The type of the target is {kind}: "
                f"{what} hold more than 2 classes ({found[:5].tolist()}...), and "
                "StreamingLogisticRegression is a binary classifier"
            )
        lo, hi = found[0], found[-1]
    if lo is None or lo == hi:
        n = 0 if lo is None else 1
        raise ValueError(
            f"{what} hold {n} class(es); StreamingLogisticRegression needs samples of "
            "exactly 2 classes"
        )
    return np.array([lo, hi])


def _data_conversion_warning() -> type[Warning]:
    try:
        from sklearn.exceptions import (  # type: ignore[import-untyped,unused-ignore]
            DataConversionWarning,
        )
    except ImportError:
        return UserWarning
    return DataConversionWarning  # type: ignore[no-any-return,unused-ignore]


def _label_chunks(store: Any) -> Any:
    labels = getattr(store, "labels", None)
    if labels is not None:
        labels = np.asarray(labels)
        step = 1 << 22
        return (labels[s : s + step] for s in range(0, labels.shape[0], step))
    return (np.asarray(yb) for _, yb in store.batches(1 << 16))


def _describe_store(store: Any) -> dict[str, Any]:
    """The store's exact per-column mean and std (its ``describe``, or the
    same moments merged over its batches: one streaming pass), checked
    finite."""
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf: reported below
        if hasattr(store, "describe"):
            stats = store.describe()
        else:
            d = int(store.dim)
            n, m, m2 = 0, np.zeros(d), np.zeros(d)
            for X, _ in store.batches(1 << 16):
                n, m, m2 = _columns.merge_moments(n, m, m2, np.asarray(X))
            stats = {"mean": m, "std": np.sqrt(m2 / max(n, 1)), "min": None}
    bad = ~(np.isfinite(stats["mean"]) & np.isfinite(stats["std"]))
    if stats["min"] is not None:
        bad |= ~(np.isfinite(stats["min"]) & np.isfinite(stats["max"]))
    if np.any(bad):
        cols = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"the store's features contain NaN or infinity (columns {cols})")
    return stats  # type: ignore[no-any-return]


def _array_groups(
    X: npt.NDArray[Any], y: npt.NDArray[Any], bs: int, shuffle: bool, seed: Any, drop_last: bool
) -> Any:
    """In-memory arrays as the store's groups: the same row order as
    ``FeatureStore._batch_groups`` for the same seed."""
    n = X.shape[0]
    stop = (n // bs) * bs if drop_last else n
    step = max(1, _GROUP_ROWS // bs) * bs
    if not shuffle:
        return (
            (X[lo : lo + step][: stop - lo], y[lo : min(lo + step, stop)], bs)
            for lo in range(0, stop, step)
        )
    order = batch_order(n, bs, seed).view(np.int64)[:stop]
    return ((X[order[lo : lo + step]], y[order[lo : lo + step]], bs) for lo in range(0, stop, step))


_GROUP_ROWS = 16384
_NO_CHANGE = 5  # epochs without a tol improvement that end a fit
