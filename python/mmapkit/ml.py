"""Out-of-core training on a :class:`~mmapkit.FeatureStore`:
:class:`StreamingLogisticRegression`, a scikit-learn estimator.

Logistic regression by mini-batch gradient descent with L2
regularisation, in ``float32`` numpy (the matrix products go to BLAS):
binary for two classes, multinomial (softmax, the cross-entropy of
scikit-learn's ``LogisticRegression``) for more. For two classes, a batch
``X`` (m × d, standardised: see below) with labels ``y`` in {0, 1}
(``classes_[1]`` is 1), with ``λ = l2`` and ``η`` the epoch's rate::

    p  = σ(X·w + b)                 σ(z) = 1/(1 + e^-z)
    gw = Xᵀ(p − y) / s + 2λ·w
    gb = Σ(p − y)  / s + 2λ·b
    w ← w − η·gw
    b ← b − η·gb

with ``s = m`` for ``reduction="mean"`` (the default: per-example average,
a learning rate that does not depend on the batch size) and ``s = 1`` for
``reduction="sum"`` (the update rule of the article this module follows).
For K > 2 classes the same rule with ``P = softmax(X·W + b)`` (m × K) and
one-hot ``Y`` in place of ``p`` and ``y``: ``gW = Xᵀ(P − Y)/s + 2λ·W``.
Row weights (``sample_weight`` times ``class_weight``'s factor, divided by
their mean) multiply each row's ``p − y``.
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

        def step(
            X: npt.NDArray[np.float32],
            y2: npt.NDArray[np.float32],
            wv: npt.NDArray[np.float32] | None = None,
        ) -> None:
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
            if wv is not None:  # row weights (one more call)
                mul(z, wv, out=z)
            dot(z, X, out=gw)
            addsum(z, out=gb)
            if shrink is not None:
                mul(theta, shrink, out=theta)
            sub(theta, g, out=theta)

        # A local function (not stored on the model, which pickles).
        self.step = step


class _SoftmaxKernel:
    """The multinomial (softmax) update step, on preallocated buffers.

    ``θ`` is ``(d + 1, K)``: the weights ``V`` (``d × K``) and the biases
    ``c`` (its last row), for the standardised features. For a batch ``X``
    with one-hot labels ``Y`` and row weights ``ω`` (1 without weights)::

        P = softmax(X·V + c)            (each row: e^(z − max z) / Σ)
        R = ω·(P − Y)·η'                η' = η/s
        θ ← (1 − 2ηλ)·θ − (XᵀR, ΣR)

    the gradient of the multinomial cross-entropy (scikit-learn's
    ``LogisticRegression`` for more than two classes). Subtracting each
    row's maximum keeps ``e^z`` from overflowing."""

    def __init__(self, theta: npt.NDArray[np.float32], lr: float, l2: float, mean: bool) -> None:
        self.lr = lr
        W, b = theta[:-1], theta[-1]  # views: updated in place with θ
        g = np.empty_like(theta)
        gW, gb = g[:-1], g[-1]
        K = theta.shape[1]
        shrink = np.full(theta.shape, 1 - 2 * lr * l2, dtype=np.float32) if l2 else None
        bufs: dict[int, tuple[npt.NDArray[np.float32], ...]] = {}
        dot, sub, mul, exp, add = np.dot, np.subtract, np.multiply, np.exp, np.add

        def step(
            X: npt.NDArray[np.float32],
            Y: npt.NDArray[np.float32],
            wv: npt.NDArray[np.float32] | None = None,
        ) -> None:
            m = X.shape[0]
            bb = bufs.get(m)
            if bb is None:
                if len(bufs) > 8:
                    bufs.clear()
                k = np.float32(lr / (m if mean else 1))
                bb = bufs[m] = (
                    np.empty((m, K), dtype=np.float32),
                    np.empty((m, 1), dtype=np.float32),
                    np.full((m, 1), k, dtype=np.float32),
                )
            Z, col, kv = bb
            dot(X, W, out=Z)
            add(Z, b, out=Z)
            np.max(Z, axis=1, keepdims=True, out=col)
            sub(Z, col, out=Z)
            exp(Z, out=Z)
            add.reduce(Z, axis=1, keepdims=True, out=col)
            np.divide(Z, col, out=Z)
            sub(Z, Y, out=Z)
            mul(Z, kv, out=Z)
            if wv is not None:
                mul(Z, wv[:, None], out=Z)
            dot(X.T, Z, out=gW)
            add.reduce(Z, axis=0, out=gb)
            if shrink is not None:
                mul(theta, shrink, out=theta)
            sub(theta, g, out=theta)

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
    "class_weight",
)


class StreamingLogisticRegression:
    """Logistic regression (binary, or multinomial for more than two
    classes) trained out of core, a scikit-learn estimator; see the module
    docs for the update rule and the defaults.

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
    - ``class_weight`` (None, default; a dict ``{label: weight}``, other
      classes 1; or ``"balanced"``: ``n_samples / (n_classes ·
      count(class))``, scikit-learn's formula): a factor on the weight of
      each row of that class (see :meth:`fit`'s ``sample_weight``).

    Fitted attributes: ``classes_`` (the label values, sorted; for two,
    labels equal to ``classes_[1]`` are the positive class), ``coef_``
    (``float32``, for raw features: shape ``(1, d)`` for two classes,
    ``(n_classes, d)`` for more, as scikit-learn's), ``intercept_``
    (``float32``, ``(1,)`` or ``(n_classes,)``),
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
        class_weight: Any = None,
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
        self.class_weight = class_weight

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
            classifier_tags=ClassifierTags(multi_class=True),
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
        cw = p["class_weight"]
        if not (cw is None or isinstance(cw, dict) or (isinstance(cw, str) and cw == "balanced")):
            raise ValueError(f"class_weight must be None, 'balanced' or a dict, got {cw!r}")
        return p

    # ----- parameters -----------------------------------------------------

    # Two classes: θ = (v/2, c/2) in one buffer of d + 1, (v, c) the weights
    # and bias for the standardised features: the kernel's tanh form needs
    # (x·v + c)/2, which x·(v/2) + c/2 gives with no extra scaling call
    # (halving is exact), and the L2 shrink and the update are then one call
    # each for both. K > 2 classes: θ = (V; c), shape (d + 1, K), unhalved.

    def _folded(self) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """``(W, b)`` for raw features, ``W = V/σ`` and ``b = c − μ·W``:
        shapes ``(1, d)`` and ``(1,)`` for two classes, ``(K, d)`` and
        ``(K,)`` for K > 2 (scikit-learn's)."""
        theta = self._need_fit()
        if theta.ndim == 1:
            v = theta[:-1].astype(np.float64) * 2
            c = float(theta[-1]) * 2
            if self.mean_ is not None and self.scale_ is not None:
                v = v / self.scale_
                c -= float(np.dot(self.mean_, v))
            return v.astype(np.float32)[None, :], np.array([c], dtype=np.float32)
        V = theta[:-1].astype(np.float64)
        cs = theta[-1].astype(np.float64)
        if self.mean_ is not None and self.scale_ is not None:
            V = V / self.scale_[:, None]
            cs = cs - np.einsum("j,jk->k", self.mean_, V)
        return np.ascontiguousarray(V.T, dtype=np.float32), cs.astype(np.float32)

    @property
    def coef_(self) -> npt.NDArray[np.float32]:
        """The weights for raw features (a fresh ``float32`` array): shape
        ``(1, d)`` for two classes (the positive class ``classes_[1]``'s),
        ``(n_classes, d)`` for more, as scikit-learn's ``LogisticRegression``."""
        return self._folded()[0]

    @property
    def intercept_(self) -> npt.NDArray[np.float32]:
        """The biases for raw features (``float32``): shape ``(1,)`` for two
        classes, ``(n_classes,)`` for more."""
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
        """Zero parameters for ``d`` features and ``classes`` (the tanh
        kernel's ``(d + 1,)`` for two, ``(d + 1, K)`` for more); ``stats``
        (``describe()``'s dict) gives the standardisation."""
        k = classes.shape[0]
        self._theta = np.zeros(d + 1 if k == 2 else (d + 1, k), dtype=np.float32)
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
        cw: npt.NDArray[np.float64] | None = None,
        wbar: float = 1.0,
    ) -> float:
        """One update per batch of each group ``(X, y, batch_size)`` or
        ``(X, y, batch_size, sample_weight)``: consecutive batches of
        ``batch_size`` rows (the last may be short). Per-group work (labels
        to ±1 or one-hot, row weights, standardising into a reused buffer)
        is a few vectorised calls per group; see :class:`_Kernel` and
        :class:`_SoftmaxKernel` for the step. A row's weight is its sample
        weight times ``cw[its class]`` over ``wbar`` (the mean weight of the
        training rows, so that weights are relative and ``"mean"`` is the
        weighted mean). With ``track_loss``, returns the progressive log
        loss: each group's (weighted) loss under the parameters before
        training on it (one matrix product per group), summed over the
        rows; else 0."""
        theta = self._need_fit()
        binary = theta.ndim == 1
        kernel = _Kernel if binary else _SoftmaxKernel
        step = kernel(theta, lr, float(p["l2"]), p["reduction"] == "mean").step
        classes = self.classes_
        k = classes.shape[0]
        pos = classes[-1]
        unit = binary and bool(classes[0] == 0 and pos == 1)
        mu: npt.NDArray[np.float32] | None = None
        inv = mu
        if self.mean_ is not None and self.scale_ is not None:
            mu = self.mean_.astype(np.float32)
            inv = (1 / self.scale_).astype(np.float32)
        buf = np.empty(0, dtype=np.float32)
        loss = 0.0
        for group in groups:
            X_in, y, bs = group[0], group[1], group[2]
            sw = group[3] if len(group) > 3 else None
            m = X_in.shape[0]
            if mu is None or inv is None:
                X = X_in.astype(np.float32, copy=False)
            else:
                if buf.size < X_in.size:
                    buf = np.empty(X_in.size, dtype=np.float32)
                X = buf[: X_in.size].reshape(X_in.shape)
                np.subtract(X_in, mu, out=X, casting="unsafe")
                np.multiply(X, inv, out=X)
            cidx: npt.NDArray[np.intp] | None = None
            if binary:
                if unit:  # labels 0/1 (the common case): 2y − 1 in two calls
                    t = np.multiply(y, 2, dtype=np.float32)
                else:
                    t = np.equal(y, pos).astype(np.float32)
                    t *= 2
                t -= 1
                if cw is not None:
                    cidx = (t > 0).astype(np.intp)
            else:
                cidx = np.searchsorted(classes, y)
                t = np.zeros((m, k), dtype=np.float32)
                t[np.arange(m), cidx] = 1
            wv: npt.NDArray[np.float32] | None = None
            if sw is not None or cw is not None:
                r = np.ones(m) if sw is None else np.asarray(sw, dtype=np.float64)
                if cw is not None and cidx is not None:
                    r = r * cw[cidx]
                wv = (r / wbar).astype(np.float32)
            if track_loss:
                if binary:  # z/2 = x·θ_w + θ_b; loss = log(1 + e^(−t·z))
                    u = X @ theta[:-1]
                    u += theta[-1]
                    u *= t
                    u *= -2
                    rl = np.logaddexp(0, u)
                else:  # loss = logsumexp(z) − z[y]
                    Z = X @ theta[:-1]
                    Z += theta[-1]
                    zy = np.einsum("ij,ij->i", Z, t)
                    top = Z.max(axis=1)
                    Z -= top[:, None]
                    rl = np.log(np.exp(Z).sum(axis=1)) + top - zy
                if wv is not None:
                    rl = rl * wv
                loss += float(np.sum(rl, dtype=np.float64))
            if wv is None:
                for s in range(0, m, bs):
                    step(X[s : s + bs], t[s : s + bs])
            else:
                for s in range(0, m, bs):
                    step(X[s : s + bs], t[s : s + bs], wv[s : s + bs])
            self.n_steps_ += -(-m // bs)
            if bar is not None:
                bar.step(m, label)
        return loss

    def fit(
        self,
        X: Any,
        y: npt.ArrayLike | None = None,
        sample_weight: Any = None,
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
        the tolerance (see the class docs). The labels must hold at least
        two values (any: they become ``classes_``; two train the binary
        model, more the multinomial one); NaN or infinity in the labels or
        the features raise :class:`ValueError`.

        ``sample_weight`` (finite, ``>= 0``): one weight per row, a
        sequence or array for arrays; for a store, an array of ``len(store)``
        (an ``np.memmap`` or :class:`~mmapkit.ArrayStore` is read where it
        lies, a row group at a time) or the path of a ``.npy`` file of them.
        Weights multiply each row's gradient and loss (with ``class_weight``'s
        factor for its class) and are relative: divided by their mean, so
        uniform weights change nothing and ``reduction="mean"`` averages
        with them. Rows of weight 0 have no effect: for arrays they are
        left out of training; for a store they stay in their batches with
        no gradient. With ``standardize`` the mean and standard deviation
        are the weighted ones. Integer weights on a full batch
        (``batch_size >= n``, ``shuffle=False``) train as repeated rows.
        A store fit with weights and ``shuffle=True`` needs a
        :class:`~mmapkit.FeatureStore` (whose row order it follows).

        ``drop_last`` and ``prefetch`` are passed to the store's
        ``batches``."""
        p = self._checked_params()
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        spec = p["class_weight"]
        cw: npt.NDArray[np.float64] | None = None
        wbar = 1.0
        if y is None and hasattr(X, "batches") and hasattr(X, "dim"):
            store = X
            d = int(store.dim)
            n = len(store)
            classes = _classes(_label_chunks(store), "the store's labels")
            sw = None if sample_weight is None else _store_sample_weight(sample_weight, n)
            if sw is not None or spec is not None:
                sw, cw, wbar = _store_weighting(store, sw, spec, classes)
            if sw is not None and p["shuffle"] and not hasattr(store, "batch_groups"):
                raise ValueError(
                    "sample_weight with shuffle=True needs a FeatureStore (whose shuffled "
                    "row order the weights follow); pass shuffle=False for this store"
                )
            if not p["standardize"]:
                stats = None
            elif sw is None and cw is None:
                stats = _describe_store(store)
            else:
                stats = _weighted_stats(_store_rows(store, sw, cw, classes))
            base = getattr(store, "batch_groups", None)
            if base is None:

                def base(bs: int, **kw: Any) -> Any:
                    return (
                        (np.asarray(Xb), np.asarray(yb), len(yb))
                        for Xb, yb in store.batches(bs, **kw)
                        if len(yb)
                    )

            if sw is None:
                groups = base
            else:
                weights = sw

                def groups(bs: int, *, shuffle: bool, seed: Any, **kw: Any) -> Any:
                    order = batch_order(n, bs, seed).view(np.int64) if shuffle else None
                    it = base(bs, shuffle=shuffle, seed=seed, **kw)
                    return _with_weights(it, weights, order)
        else:
            if y is None:
                raise ValueError(
                    "StreamingLogisticRegression requires y to be passed, but the target y "
                    "is None: fit(X, y) with arrays, or fit(store) with a FeatureStore"
                )
            Xa, ya = self._check_xy(X, y, fitted=False)
            classes = _classes([ya], "y")
            r = _row_weights(_sample_weight(sample_weight, ya.shape[0]), ya, classes, spec)
            if r is not None:
                keep = r > 0
                if not np.all(keep):
                    Xa, ya, r = Xa[keep], ya[keep], r[keep]
                if r.size == 0:
                    raise ValueError(
                        "every sample weight is zero (sample_weight times class_weight): "
                        "nothing to fit"
                    )
                if np.all(r == r[0]):
                    r = None  # uniform: the unweighted fit, exactly
                else:
                    wbar = float(np.mean(r))
            d, n = Xa.shape[1], Xa.shape[0]
            if not p["standardize"]:
                stats = None
            elif r is None:
                stats = _columns.describe(Xa)
            else:
                rows = _columns.row_chunks(Xa)
                stats = _weighted_stats((c, r[s : s + c.shape[0]]) for c, s in _with_starts(rows))
            rw = r

            def groups(bs: int, *, shuffle: bool, seed: Any, **_: Any) -> Any:
                return _array_groups(Xa, ya, bs, shuffle, seed, drop_last, rw)

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
                    it,
                    lr,
                    p,
                    bar if bar.on else None,
                    f"epoch {e + 1}/{epochs}",
                    tol is not None,
                    cw,
                    wbar,
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
        sample_weight: npt.ArrayLike | None = None,
    ) -> StreamingLogisticRegression:
        """One update per ``batch_size`` rows of ``(X, y)`` at the constant
        learning rate ``lr``. The first call (on an unfitted model) needs
        ``classes`` (every label value, as in scikit-learn: two for the
        binary model, more for the multinomial one) and takes the
        standardisation from its batch's statistics (with
        ``standardize=True``); later calls, and calls after :meth:`fit`,
        continue with the same ``classes_`` and standardisation.
        ``sample_weight`` as in :meth:`fit`, relative within the call;
        ``class_weight`` may be a dict (``"balanced"`` needs the whole
        label set: :class:`ValueError`, as scikit-learn's ``SGDClassifier``)."""
        p = self._checked_params()
        spec = p["class_weight"]
        if isinstance(spec, str):
            raise ValueError(
                "class_weight 'balanced' is not supported for partial_fit: pass the weights "
                "as a dict (n_samples / (n_classes * count) per class) or as sample_weight"
            )
        first = self.__dict__.get("_theta") is None
        Xa, ya = self._check_xy(X, y, fitted=not first)
        sw = _sample_weight(sample_weight, ya.shape[0])
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit")
            cl = _classes([np.asarray(classes)], "classes")
            stats = None
            if p["standardize"]:
                if sw is None or not np.any(sw > 0) or np.all(sw == sw[0]):
                    stats = _columns.describe(Xa)
                else:
                    stats = _weighted_stats([(Xa, sw)])
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
        r = _row_weights(sw, ya, self.classes_, spec)
        wbar = 1.0
        if r is not None:
            keep = r > 0
            if not np.all(keep):
                Xa, ya, r = Xa[keep], ya[keep], r[keep]
            if r.size and np.all(r == r[0]):
                r = None
            elif r.size:
                wbar = float(np.mean(r))
        if Xa.shape[0]:
            group = (
                (Xa, ya, int(p["batch_size"])) if r is None else (Xa, ya, int(p["batch_size"]), r)
            )
            self._train([group], float(p["lr"]), p, wbar=wbar)
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
        """``X·Wᵀ + b`` per row (``float32``): shape ``(m,)`` for two classes
        (positive for ``classes_[1]``), ``(m, n_classes)`` for more (the
        class with the largest value is predicted), as scikit-learn's.

        Each row's sums are taken alone, in ``float64``, so a row's value
        does not depend on where it is in ``X`` (a BLAS matrix-vector product
        rounds rows differently by their position: scikit-learn's
        sample-order check failed with OpenBLAS 0.3.31 by one ``float32``
        ulp)."""
        w, b = self._folded()
        Xa = self._check_x(X)
        w64 = w.astype(np.float64)
        if w.shape[0] == 1:
            z: npt.NDArray[np.float64] = np.einsum(
                "ij,j->i", Xa, w64[0], dtype=np.float64, casting="safe"
            )
            return (z + float(b[0])).astype(np.float32)
        zs: npt.NDArray[np.float64] = np.einsum(
            "ij,kj->ik", Xa, w64, dtype=np.float64, casting="safe"
        )
        return (zs + b.astype(np.float64)).astype(np.float32)

    def predict_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """The probability of each class per row, shape ``(m, n_classes)``
        (columns in ``classes_``'s order): ``[1 − σ(z), σ(z)]`` for two
        classes, the softmax of the decision values for more."""
        z = self.decision_function(X)
        if z.ndim == 1:
            p = sigmoid(z)
            return np.stack([1 - p, p], axis=1)
        return _softmax(z.astype(np.float64)).astype(np.float32)

    def predict_log_proba(self, X: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The log of :meth:`predict_proba`, computed stably."""
        z = self.decision_function(X).astype(np.float64)
        if z.ndim == 1:
            return np.stack([-np.logaddexp(0, z), -np.logaddexp(0, -z)], axis=1)
        return z - _logsumexp(z)[:, None]

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[Any]:
        """The class of the largest decision value: for two classes
        ``classes_[1]`` where it is > 0, else ``classes_[0]``."""
        z = self.decision_function(X)  # raises first when not fitted
        if z.ndim == 1:
            return self.classes_[(z > 0).astype(np.intp)]
        out: npt.NDArray[Any] = self.classes_[np.argmax(z, axis=1)]
        return out

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
        plus the penalty ``l2·‖θ‖²`` on the trained (standardised)
        parameters: ``mean(log(1 + e^z) − t·z) + λ‖θ‖²`` for two classes
        (``t = 1`` for ``classes_[1]``, else 0), ``mean(logsumexp(z) −
        z[y]) + λ‖θ‖²`` (the cross-entropy) for more; computed stably, in
        ``float64``; labels outside ``classes_`` raise :class:`ValueError`.
        Unweighted (``sample_weight`` and ``class_weight`` weight training
        only)."""
        theta = self._need_fit().astype(np.float64)
        if theta.ndim == 1:
            theta = theta * 2
        acc = 0.0
        total = 0
        for Xb, y_in in self._batches(data, y, batch_size):
            yb = np.asarray(y_in)
            if not np.all(np.isin(yb, self.classes_)):
                raise ValueError(f"labels outside classes_ {self.classes_.tolist()}")
            z = self.decision_function(Xb).astype(np.float64)
            if z.ndim == 1:
                acc += float(np.sum(np.logaddexp(0.0, z) - (yb == self.classes_[1]) * z))
            else:
                zy = z[np.arange(z.shape[0]), np.searchsorted(self.classes_, yb)]
                acc += float(np.sum(_logsumexp(z) - zy))
            total += Xb.shape[0]
        reg = float(self.l2) * float(np.sum(theta * theta))
        return (acc / total if total else float("nan")) + reg


def _logsumexp(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``log Σ e^z`` per row, through the row's maximum (no overflow)."""
    top = z.max(axis=1)
    return np.log(np.exp(z - top[:, None]).sum(axis=1)) + top  # type: ignore[no-any-return]


def _softmax(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``e^z / Σ e^z`` per row, through the row's maximum (no overflow)."""
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


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
    """The sorted distinct values of the labels in ``chunks`` (at least
    two): per chunk, only the values not already found are sorted (one
    comparison pass per known class, no sort of the whole label array).
    The errors use scikit-learn's wording ("Unknown label type")."""
    found: npt.NDArray[Any] | None = None
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
        if found is not None and found.size <= 64 and c.dtype.kind != "U":
            c = c[~np.isin(c, found)]
        new = np.unique(c)
        if new.dtype.kind == "f" and np.any(new != np.round(new)):
            raise ValueError(
                f"Unknown label type: continuous. {what} hold non-integer values "
                f"({new[new != np.round(new)][:5].tolist()}...): StreamingLogisticRegression "
                "is a classifier"
            )
        found = new if found is None else np.union1d(found, new)
    if found is None or found.size < 2:
        n = 0 if found is None else 1
        raise ValueError(
            f"{what} hold {n} class(es); StreamingLogisticRegression needs samples of "
            "at least 2 classes"
        )
    return found


def _sample_weight(sample_weight: Any, n: int) -> npt.NDArray[np.float64] | None:
    """``sample_weight`` for ``n`` rows as ``float64`` (a number: every
    row), checked finite and ``>= 0`` (scikit-learn's messages)."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, numbers.Number) and not isinstance(sample_weight, bool):
        sw = np.full(n, float(sample_weight))  # type: ignore[arg-type]
    else:
        try:
            sw = np.asarray(sample_weight, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"sample_weight must be numeric: {e}") from None
        if sw.ndim != 1:
            raise ValueError("Sample weights must be 1D array or scalar")
        if sw.shape != (n,):
            raise ValueError(f"sample_weight.shape == {sw.shape}, expected {(n,)}!")
    _check_weights(sw)
    return sw


def _check_weights(sw: npt.NDArray[Any]) -> None:
    if not np.all(np.isfinite(sw)):
        raise ValueError("Input sample_weight contains NaN or infinity.")
    if np.any(sw < 0):
        raise ValueError("Negative values in data passed to sample_weight")


def _class_weight_vector(
    spec: Any, classes: npt.NDArray[Any], counts: npt.NDArray[np.int64] | None
) -> npt.NDArray[np.float64] | None:
    """One weight per class from ``class_weight``: None; ``"balanced"``,
    ``n_samples / (n_classes · count)`` (scikit-learn's
    ``compute_class_weight``); a dict ``{label: weight}`` (others 1)."""
    if spec is None:
        return None
    k = classes.shape[0]
    if isinstance(spec, str):
        if counts is None or np.any(counts == 0):
            raise ValueError("class_weight='balanced' needs samples of every class")
        out: npt.NDArray[np.float64] = float(counts.sum()) / (k * counts.astype(np.float64))
        return out
    cw = np.ones(k)
    for label, weight in spec.items():
        hit = np.flatnonzero(classes == label) if np.ndim(label) == 0 else np.empty(0)
        if hit.size != 1:
            raise ValueError(f"Class label {label!r} not present.")
        v = float(weight)
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"class_weight[{label!r}] must be finite and >= 0, got {weight!r}")
        cw[hit[0]] = v
    return cw


def _row_weights(
    sw: npt.NDArray[np.float64] | None, y: npt.NDArray[Any], classes: npt.NDArray[Any], spec: Any
) -> npt.NDArray[np.float64] | None:
    """Each row's weight: its sample weight times its class's weight (None
    when neither is given)."""
    if spec is None:
        return sw
    idx = np.searchsorted(classes, y)
    counts = np.bincount(idx, minlength=classes.shape[0]) if isinstance(spec, str) else None
    cw = _class_weight_vector(spec, classes, counts)
    r = np.ones(y.shape[0]) if cw is None else cw[idx]
    return r if sw is None else sw * r


def _store_sample_weight(sample_weight: Any, n: int) -> npt.NDArray[Any]:
    """A store fit's ``sample_weight``: an array of ``n`` (not copied: a
    mapping stays one), an :class:`~mmapkit.ArrayStore` or a ``.npy`` path."""
    import os

    from .store import ArrayStore

    src = sample_weight
    if isinstance(src, (str, os.PathLike)):
        src = ArrayStore.open(src, "r")
    if isinstance(src, ArrayStore):
        src = src.numpy()
    sw = np.asarray(src)
    if sw.ndim != 1 or sw.shape[0] != n:
        raise ValueError(
            f"sample_weight for a store must hold one weight per row ({n},), got {sw.shape}"
        )
    if sw.dtype.kind not in "biuf":
        raise ValueError(f"sample_weight must be numeric, got dtype {sw.dtype}")
    return sw


def _store_weighting(
    store: Any, sw: npt.NDArray[Any] | None, spec: Any, classes: npt.NDArray[Any]
) -> tuple[npt.NDArray[Any] | None, npt.NDArray[np.float64] | None, float]:
    """(sample weights, class weights, mean row weight) of a store fit, in
    one pass over the labels and weights (which it checks); uniform
    weights become None (the unweighted fit, exactly)."""
    k = classes.shape[0]
    counts = np.zeros(k, dtype=np.int64)
    per_class = np.zeros(k)
    pos = 0
    first = None
    uniform = True
    for c in _label_chunks(store):
        idx = np.searchsorted(classes, np.asarray(c))
        m = idx.shape[0]
        counts += np.bincount(idx, minlength=k)
        if sw is not None:
            w = np.asarray(sw[pos : pos + m], dtype=np.float64)
            _check_weights(w)
            if m:
                first = w[0] if first is None else first
                uniform = uniform and bool(np.all(w == first))
            per_class += np.bincount(idx, weights=w, minlength=k)
        pos += m
    if sw is not None and uniform:
        sw = None
    if sw is None:
        per_class = counts.astype(np.float64)
    cw = _class_weight_vector(spec, classes, counts)
    if cw is not None and np.all(cw == cw[0]) and sw is None:
        cw = None
    total = float(per_class @ (np.ones(k) if cw is None else cw))
    if sw is None and cw is None:
        return None, None, 1.0
    if total <= 0:
        raise ValueError(
            "every sample weight is zero (sample_weight times class_weight): nothing to fit"
        )
    return sw, cw, total / max(int(counts.sum()), 1)


def _store_rows(
    store: Any,
    sw: npt.NDArray[Any] | None,
    cw: npt.NDArray[np.float64] | None,
    classes: npt.NDArray[Any],
) -> Any:
    """The store's rows in order with their weights ``(X, r)``, in batches."""
    pos = 0
    for Xb, yb in store.batches(1 << 16):
        m = len(yb)
        r = np.ones(m) if sw is None else np.asarray(sw[pos : pos + m], dtype=np.float64)
        if cw is not None:
            r = r * cw[np.searchsorted(classes, np.asarray(yb))]
        pos += m
        yield np.asarray(Xb), r


def _weighted_stats(pairs: Any) -> dict[str, Any]:
    """The weighted per-column mean and standard deviation of rows ``(X,
    r)`` (rows of weight 0 count for nothing), checked finite."""
    wsum, mean, m2 = 0.0, None, None
    with np.errstate(invalid="ignore", over="ignore"):
        for X, r in pairs:
            if mean is None or m2 is None:
                mean, m2 = np.zeros(X.shape[1]), np.zeros(X.shape[1])
            wsum, mean, m2 = _columns.merge_weighted_moments(wsum, mean, m2, X, r)
        if mean is None or m2 is None or wsum <= 0:
            raise ValueError("every sample weight is zero (sample_weight times class_weight)")
        std = np.sqrt(m2 / wsum)
    bad = ~(np.isfinite(mean) & np.isfinite(std))
    if np.any(bad):
        cols = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"the features contain NaN or infinity (columns {cols})")
    return {"mean": mean, "std": std, "min": None}


def _with_starts(chunks: Any) -> Any:
    """``(chunk, its first row)`` for consecutive row chunks."""
    s = 0
    for c in chunks:
        yield c, s
        s += c.shape[0]


def _with_weights(groups: Any, sw: npt.NDArray[Any], order: npt.NDArray[np.int64] | None) -> Any:
    """A store's groups with their rows' sample weights: rows in order,
    or ``order``'s (the epoch's :func:`~mmapkit.features.batch_order`)."""
    pos = 0
    for X, y, bs in groups:
        m = len(y)
        rows = slice(pos, pos + m) if order is None else order[pos : pos + m]
        yield X, y, bs, np.asarray(sw[rows], dtype=np.float64)
        pos += m


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
    X: npt.NDArray[Any],
    y: npt.NDArray[Any],
    bs: int,
    shuffle: bool,
    seed: Any,
    drop_last: bool,
    w: npt.NDArray[np.float64] | None = None,
) -> Any:
    """In-memory arrays as the store's groups: the same row order as
    :meth:`FeatureStore.batch_groups` for the same seed (with the rows'
    weights ``w`` as a fourth element when given)."""
    n = X.shape[0]
    stop = (n // bs) * bs if drop_last else n
    step = max(1, _GROUP_ROWS // bs) * bs
    if not shuffle:
        if w is None:
            return (
                (X[lo : lo + step][: stop - lo], y[lo : min(lo + step, stop)], bs)
                for lo in range(0, stop, step)
            )
        return (
            (
                X[lo : min(lo + step, stop)],
                y[lo : min(lo + step, stop)],
                bs,
                w[lo : min(lo + step, stop)],
            )
            for lo in range(0, stop, step)
        )
    order = batch_order(n, bs, seed).view(np.int64)[:stop]
    if w is None:
        return (
            (X[order[lo : lo + step]], y[order[lo : lo + step]], bs) for lo in range(0, stop, step)
        )
    return ((X[o], y[o], bs, w[o]) for o in (order[lo : lo + step] for lo in range(0, stop, step)))


_GROUP_ROWS = 16384
_NO_CHANGE = 5  # epochs without a tol improvement that end a fit
