"""The samplers: one device function per distribution, drawing from its element's Philox stream,
and its NumPy twin.

Each CUDA function ``gm_s_<name>(gm_rs& s, double p0, ...)`` returns one variate in double
precision; a rejection sampler loops in the thread, taking fresh uniforms from its stream until
it accepts. The twin ``(draws, e, *params)`` computes the variates of elements ``e`` with the
same algorithm over NumPy arrays: the elements still looping draw again, round after round, so
each one takes the same numbers as its GPU thread.

The algorithms (textbook facts, written here from their descriptions): Marsaglia and Tsang's
squeeze-and-reject for gamma, boosted by ``U**(1/a)`` below shape 1; Knuth's multiplication
for Poisson means below 10 and Hörmann's PTRS transformed rejection above; binomial inversion
for ``n min(p, 1-p) < 10`` and Hörmann's BTRS above; hypergeometric inversion searching outward
from the mode; Best and Fisher's rejection for von Mises; Kemp's method for the logarithmic
series; the rejection of Devroye's book for Zipf; the Michael-Schucany-Haas transform for Wald;
Jöhnk's method for beta with both shapes at most 1, a ratio of gammas otherwise; the others
are closed-form transforms of uniforms, exponentials and normals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._philox import Draws, lgamma

__all__ = ["Sampler", "SAMPLERS", "CUDA"]

CUDA = r"""
__device__ double gm_s_gamma(gm_rs& s, double a) {
  if (!(a > 0.0)) return 0.0;
  if (a == 1.0) return s.expo();
  const double aa = a < 1.0 ? a + 1.0 : a;
  const double d = aa - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  double r;
  for (;;) {
    const double x = s.normal();
    const double v1 = 1.0 + c * x;
    if (v1 <= 0.0) continue;
    const double v = v1 * v1 * v1, u = s.u(), x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2 || log(u) < 0.5 * x2 + d * (1.0 - v + log(v))) {
      r = d * v; break;
    }
  }
  if (a < 1.0) r *= exp(log(s.u()) / a);
  return r;
}
__device__ double gm_s_poisson(gm_rs& s, double lam) {
  if (!(lam > 0.0)) return 0.0;
  if (lam < 10.0) {
    const double limit = exp(-lam);
    double prod = 1.0, k = 0.0;
    for (;;) { prod *= s.u(); if (prod > limit) k += 1.0; else return k; }
  }
  const double slam = sqrt(lam), loglam = log(lam);
  const double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  const double invalpha = 1.1239 + 1.1328 / (b - 3.4), vr = 0.9277 - 3.6224 / (b - 2.0);
  for (;;) {
    const double U = s.u() - 0.5, V = s.u();
    const double us = 0.5 - fabs(U);
    const double k = floor((2.0 * a / us + b) * U + lam + 0.43);
    if (us >= 0.07 && V <= vr) return k;
    if (k < 0.0 || (us < 0.013 && V > us)) continue;
    if (log(V) + log(invalpha) - log(a / (us * us) + b) <= -lam + k * loglam - lgamma(k + 1.0))
      return k;
  }
}
// the law's constants made once (a kernel with scalar parameters makes them once per thread
// and draws many elements from them), then draws: inversion or BTRS
struct gm_binom {
  double n, pp, q, qn, bound, b, a, c, vr, alpha, lpq, m, h, konst;
  int mode;  // 0: the constant konst, 1: inversion, 2: BTRS
  bool flip;
  __device__ gm_binom(double n_, double p)
      : n(floor(n_)), pp(0.0), q(0.0), qn(0.0), bound(0.0), b(0.0), a(0.0), c(0.0), vr(0.0),
        alpha(0.0), lpq(0.0), m(0.0), h(0.0), konst(0.0), mode(0), flip(false) {
    if (n <= 0.0 || p <= 0.0) { konst = 0.0; return; }
    if (p >= 1.0) { konst = n; return; }
    flip = p > 0.5;
    pp = flip ? 1.0 - p : p;
    q = 1.0 - pp;
    if (n * pp < 10.0) {
      mode = 1;
      qn = exp(n * log1p(-pp));
      const double np_ = n * pp;
      bound = fmin(n, np_ + 10.0 * sqrt(np_ * q + 1.0));
    } else {
      mode = 2;
      const double spq = sqrt(n * pp * q);
      b = 1.15 + 2.53 * spq;
      a = -0.0873 + 0.0248 * b + 0.01 * pp;
      c = n * pp + 0.5;
      vr = 0.92 - 4.2 / b;
      alpha = (2.83 + 5.1 / b) * spq;
      lpq = log(pp / q);
      m = floor((n + 1.0) * pp);
      h = lgamma(m + 1.0) + lgamma(n - m + 1.0);
    }
  }
  __device__ double draw(gm_rs& s) const {
    if (mode == 0) return konst;
    double x;
    if (mode == 1) {
      double px = qn, U = s.u();
      x = 0.0;
      while (U > px) {
        x += 1.0;
        if (x > bound) { x = 0.0; px = qn; U = s.u(); }
        else { U -= px; px = ((n - x + 1.0) * pp * px) / (x * q); }
      }
    } else {
      for (;;) {
        const double U = s.u() - 0.5, V0 = s.u();
        const double us = 0.5 - fabs(U);
        const double k = floor((2.0 * a / us + b) * U + c);
        if (k < 0.0 || k > n) continue;
        if (us >= 0.07 && V0 <= vr) { x = k; break; }
        const double V = log(V0 * alpha / (a / (us * us) + b));
        if (V <= h - lgamma(k + 1.0) - lgamma(n - k + 1.0) + (k - m) * lpq) { x = k; break; }
      }
    }
    return flip ? n - x : x;
  }
};
__device__ double gm_s_binomial(gm_rs& s, double n, double p) { return gm_binom(n, p).draw(s); }
__device__ double gm_s_hypergeometric(gm_rs& s, double g, double b, double ns) {
  const double tot = g + b, lo = fmax(0.0, ns - b), hi = fmin(ns, g);
  if (lo >= hi) return lo;
  const double m = fmin(hi, fmax(lo, floor((ns + 1.0) * (g + 1.0) / (tot + 2.0))));
  const double lf = lgamma(g + 1.0) - lgamma(m + 1.0) - lgamma(g - m + 1.0)
      + lgamma(b + 1.0) - lgamma(ns - m + 1.0) - lgamma(b - ns + m + 1.0)
      - lgamma(tot + 1.0) + lgamma(ns + 1.0) + lgamma(tot - ns + 1.0);
  const double fm = exp(lf);
  double U = s.u() - fm;
  if (U <= 0.0) return m;
  double kl = m, kh = m, fl = fm, fh = fm;
  for (;;) {
    bool moved = false;
    if (kh < hi) {
      fh *= (g - kh) * (ns - kh) / ((kh + 1.0) * (b - ns + kh + 1.0));
      kh += 1.0; U -= fh; moved = true;
      if (U <= 0.0) return kh;
    }
    if (kl > lo) {
      fl *= kl * (b - ns + kl) / ((g - kl + 1.0) * (ns - kl + 1.0));
      kl -= 1.0; U -= fl; moved = true;
      if (U <= 0.0) return kl;
    }
    if (!moved) return m;
  }
}
__device__ double gm_s_chisquare(gm_rs& s, double df) { return 2.0 * gm_s_gamma(s, 0.5 * df); }
__device__ double gm_s_noncentral_chisquare(gm_rs& s, double df, double nonc) {
  if (nonc == 0.0) return gm_s_chisquare(s, df);
  if (df > 1.0) {
    const double c = gm_s_chisquare(s, df - 1.0), z = s.normal() + sqrt(nonc);
    return c + z * z;
  }
  const double i = gm_s_poisson(s, 0.5 * nonc);
  return gm_s_chisquare(s, df + 2.0 * i);
}
__device__ double gm_s_beta(gm_rs& s, double a, double b) {
  if (a <= 1.0 && b <= 1.0) {
    for (;;) {
      const double lu = log(s.u()) / a, lv = log(s.u()) / b;
      const double X = exp(lu), Y = exp(lv), XpY = X + Y;
      if (XpY <= 1.0) {
        if (XpY > 0.0) return X / XpY;
        const double lm = fmax(lu, lv);
        return exp(lu - lm - log(exp(lu - lm) + exp(lv - lm)));
      }
    }
  }
  const double X = gm_s_gamma(s, a), Y = gm_s_gamma(s, b);
  return X / (X + Y);
}
__device__ double gm_s_f(gm_rs& s, double dn, double dd) {
  const double x = gm_s_chisquare(s, dn) * dd;
  return x / (gm_s_chisquare(s, dd) * dn);
}
__device__ double gm_s_noncentral_f(gm_rs& s, double dn, double dd, double nonc) {
  const double t = gm_s_noncentral_chisquare(s, dn, nonc) * dd;
  return t / (gm_s_chisquare(s, dd) * dn);
}
__device__ double gm_s_standard_t(gm_rs& s, double df) {
  const double z = s.normal();
  return z / sqrt(gm_s_chisquare(s, df) / df);
}
__device__ double gm_s_standard_cauchy(gm_rs& s) {
  const double a = s.normal();
  return a / s.normal();
}
__device__ double gm_s_normal(gm_rs& s, double loc, double scale) {
  return loc + scale * s.normal();
}
__device__ double gm_s_lognormal(gm_rs& s, double mean, double sigma) {
  return exp(mean + sigma * s.normal());
}
__device__ double gm_s_uniform(gm_rs& s, double low, double high) {
  const double r = low + (high - low) * s.u();
  return r >= high ? fmax(low, nextafter(high, low)) : r;
}
__device__ double gm_s_exponential(gm_rs& s, double scale) { return scale * s.expo(); }
__device__ double gm_s_gumbel(gm_rs& s, double loc, double scale) {
  return loc - scale * log(s.expo());
}
__device__ double gm_s_laplace(gm_rs& s, double loc, double scale) {
  const double u = s.u();
  return u < 0.5 ? loc + scale * log(u + u) : loc - scale * log(2.0 - u - u);
}
__device__ double gm_s_logistic(gm_rs& s, double loc, double scale) {
  const double u = s.u();
  return loc + scale * log(u / (1.0 - u));
}
__device__ double gm_s_pareto(gm_rs& s, double a) { return expm1(s.expo() / a); }
__device__ double gm_s_power(gm_rs& s, double a) { return pow(-expm1(-s.expo()), 1.0 / a); }
__device__ double gm_s_rayleigh(gm_rs& s, double scale) { return scale * sqrt(2.0 * s.expo()); }
__device__ double gm_s_weibull(gm_rs& s, double a) {
  if (a == 0.0) return 0.0;
  return pow(s.expo(), 1.0 / a);
}
__device__ double gm_s_triangular(gm_rs& s, double left, double mode, double right) {
  const double base = right - left, lb = mode - left, ratio = lb / base, u = s.u();
  return u <= ratio ? left + sqrt(u * lb * base) : right - sqrt((1.0 - u) * (right - mode) * base);
}
__device__ double gm_s_vonmises(gm_rs& s, double mu, double kappa) {
  const double PI = 3.141592653589793;
  double r;
  if (kappa < 1e-8) {
    r = PI * (2.0 * s.u() - 1.0);
  } else if (kappa > 1e6) {
    r = mu + sqrt(1.0 / kappa) * s.normal();
    if (r < -PI) r += 2.0 * PI;
    if (r > PI) r -= 2.0 * PI;
    return r;
  } else {
    double sp;
    if (kappa < 1e-5) {
      sp = 1.0 / kappa + kappa;
    } else {
      const double rr = 1.0 + sqrt(1.0 + 4.0 * kappa * kappa);
      const double rho = (rr - sqrt(2.0 * rr)) / (2.0 * kappa);
      sp = (1.0 + rho * rho) / (2.0 * rho);
    }
    double W;
    for (;;) {
      const double Z = cospi(s.u());
      W = (1.0 + sp * Z) / (sp + Z);
      const double Y = kappa * (sp - W), V = s.u();
      if (Y * (2.0 - Y) - V >= 0.0 || log(Y / V) + 1.0 - Y >= 0.0) break;
    }
    r = acos(W);
    if (s.u() < 0.5) r = -r;
    r += mu;
  }
  const double m = fmod(fabs(r) + PI, 2.0 * PI) - PI;
  return r < 0.0 ? -m : m;
}
__device__ double gm_s_wald(gm_rs& s, double mean, double scale) {
  // mean + mean/(2 scale) (y - sqrt(4 scale y + y^2)), written without the difference: the
  // same value, which tends to the mean as the scale grows (an infinite scale gave NaN)
  const double z = s.normal(), y = mean * z * z;
  const double x = y > 0.0 ? mean - 2.0 * mean * y / (y + sqrt(4.0 * scale * y + y * y))
                           : mean;
  return s.u() <= mean / (mean + x) ? x : mean * mean / x;
}
__device__ double gm_s_geometric(gm_rs& s, double p) {
  if (p >= 1.0) return 1.0;
  return fmin(ceil(-s.expo() / log1p(-p)), 9.2233720368547748e18);
}
__device__ double gm_s_logseries(gm_rs& s, double p) {
  const double r = log1p(-p);
  for (;;) {
    const double V = s.u();
    if (V >= p) return 1.0;
    const double q = -expm1(r * s.u());
    if (V <= q * q) {
      const double k = floor(1.0 + log(V) / log(q));
      if (k < 1.0) continue;
      return k;
    }
    return V >= q ? 1.0 : 2.0;
  }
}
__device__ double gm_s_zipf(gm_rs& s, double a) {
  if (a >= 1025.0) return 1.0;  // P(2) / P(1) = 2^-a: 1 to double precision (and 2^(a-1) is inf)
  const double am1 = a - 1.0, b = exp2(am1);
  for (;;) {
    const double U = 1.0 - s.u(), V = s.u();
    const double X = floor(pow(U, -1.0 / am1));
    if (!(X >= 1.0 && X <= 9.2233720368547748e18)) continue;
    const double T = pow(1.0 + 1.0 / X, am1);
    if (V * X * (T - 1.0) / (b - 1.0) <= T / b) return X;
  }
}
__device__ double gm_s_negative_binomial(gm_rs& s, double n, double p) {
  return gm_s_poisson(s, gm_s_gamma(s, n) * ((1.0 - p) / p));
}
"""


# -- the twins ----------------------------------------------------------------------------------
def _loop(e: np.ndarray, body: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, Any]]
          ) -> np.ndarray:
    """Run a rejection loop over elements ``e``: ``body(ee, pos)`` draws for the elements ``ee``
    still looping (``pos``: their positions in ``e``) and answers (accepted, values)."""
    out = np.zeros(e.size)
    pend = np.arange(e.size)
    while pend.size:
        acc, val = body(e[pend], pend)
        val = np.broadcast_to(np.asarray(val, np.float64), acc.shape)
        out[pend[acc]] = val[acc]
        pend = pend[~acc]
    return out


def _err() -> Any:
    return np.errstate(all="ignore")


def t_gamma(d: Draws, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    out = np.zeros(e.size)
    one = a == 1.0
    out[one] = d.expo(e[one])
    mt = np.flatnonzero((a > 0) & ~one)
    if mt.size:
        aa = np.where(a[mt] < 1, a[mt] + 1.0, a[mt])
        dd = aa - 1.0 / 3.0
        c = 1.0 / np.sqrt(9.0 * dd)

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            x = d.normal(ee)
            v1 = 1.0 + c[pos] * x
            ok = v1 > 0
            acc = np.zeros(ee.size, bool)
            v = v1 ** 3
            u = np.ones(ee.size)
            u[ok] = d.u(ee[ok])
            x2 = x * x
            with _err():
                acc[ok] = (u[ok] < 1.0 - 0.0331 * x2[ok] * x2[ok]) | (
                    np.log(u[ok]) < 0.5 * x2[ok] + dd[pos][ok] * (1.0 - v[ok] + np.log(v[ok])))
            return acc, dd[pos] * v

        r = _loop(e[mt], body)
        small = a[mt] < 1
        with _err():
            r[small] *= np.exp(np.log(d.u(e[mt][small])) / a[mt][small])
        out[mt] = r
    return out


def t_poisson(d: Draws, e: np.ndarray, lam: np.ndarray) -> np.ndarray:
    out = np.zeros(e.size)
    lo = np.flatnonzero((lam > 0) & (lam < 10))
    if lo.size:
        limit = np.exp(-lam[lo])
        prod = np.ones(lo.size)
        k = np.zeros(lo.size)
        pend = np.arange(lo.size)
        while pend.size:
            prod[pend] *= d.u(e[lo[pend]])
            more = prod[pend] > limit[pend]
            k[pend[more]] += 1.0
            pend = pend[more]
        out[lo] = k
    hi = np.flatnonzero(lam >= 10)
    if hi.size:
        L = lam[hi]
        slam, loglam = np.sqrt(L), np.log(L)
        b = 0.931 + 2.53 * slam
        a = -0.059 + 0.02483 * b
        invalpha = 1.1239 + 1.1328 / (b - 3.4)
        vr = 0.9277 - 3.6224 / (b - 2.0)

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            U = d.u(ee) - 0.5
            V = d.u(ee)
            us = 0.5 - np.abs(U)
            k = np.floor((2.0 * a[pos] / us + b[pos]) * U + L[pos] + 0.43)
            quick = (us >= 0.07) & (V <= vr[pos])
            skip = (k < 0) | ((us < 0.013) & (V > us))
            with _err():
                test = np.log(V) + np.log(invalpha[pos]) - np.log(a[pos] / (us * us) + b[pos]) \
                    <= -L[pos] + k * loglam[pos] - lgamma(np.maximum(k, 0) + 1.0)
            return quick | (~skip & test), k

        out[hi] = _loop(e[hi], body)
    return out


def t_binomial(d: Draws, e: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    n = np.floor(n)
    out = np.where(p >= 1.0, n, 0.0)
    live = np.flatnonzero((n > 0) & (p > 0) & (p < 1))
    flip = p[live] > 0.5
    pp = np.where(flip, 1.0 - p[live], p[live])
    q = 1.0 - pp
    nn = n[live]
    x = np.zeros(live.size)
    inv = np.flatnonzero(nn * pp < 10.0)
    if inv.size:
        ni, pi_, qi = nn[inv], pp[inv], q[inv]
        qn = np.exp(ni * np.log1p(-pi_))
        npi = ni * pi_
        bound = np.minimum(ni, npi + 10.0 * np.sqrt(npi * qi + 1.0))
        px = qn.copy()
        U = d.u(e[live[inv]])
        X = np.zeros(inv.size)
        act = np.flatnonzero(U > px)
        while act.size:
            X[act] += 1.0
            rs = X[act] > bound[act]
            r_, s_ = act[rs], act[~rs]
            X[r_] = 0.0
            px[r_] = qn[r_]
            U[r_] = d.u(e[live[inv[r_]]])
            U[s_] -= px[s_]
            px[s_] = ((ni[s_] - X[s_] + 1.0) * pi_[s_] * px[s_]) / (X[s_] * qi[s_])
            act = act[U[act] > px[act]]
        x[inv] = X
    bt = np.flatnonzero(nn * pp >= 10.0)
    if bt.size:
        nb, pb, qb = nn[bt], pp[bt], q[bt]
        spq = np.sqrt(nb * pb * qb)
        b = 1.15 + 2.53 * spq
        a = -0.0873 + 0.0248 * b + 0.01 * pb
        c = nb * pb + 0.5
        vr = 0.92 - 4.2 / b
        alpha = (2.83 + 5.1 / b) * spq
        lpq = np.log(pb / qb)
        m = np.floor((nb + 1.0) * pb)
        h = lgamma(m + 1.0) + lgamma(nb - m + 1.0)

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            U = d.u(ee) - 0.5
            V0 = d.u(ee)
            us = 0.5 - np.abs(U)
            k = np.floor((2.0 * a[pos] / us + b[pos]) * U + c[pos])
            inside = (k >= 0) & (k <= nb[pos])
            quick = (us >= 0.07) & (V0 <= vr[pos])
            kc = np.clip(k, 0, nb[pos])
            with _err():
                V = np.log(V0 * alpha[pos] / (a[pos] / (us * us) + b[pos]))
                test = V <= h[pos] - lgamma(kc + 1.0) - lgamma(nb[pos] - kc + 1.0) + \
                    (kc - m[pos]) * lpq[pos]
            return inside & (quick | test), k

        x[bt] = _loop(e[live[bt]], body)
    out[live] = np.where(flip, nn - x, x)
    return out


def t_hypergeometric(d: Draws, e: np.ndarray, g: np.ndarray, b: np.ndarray,
                     ns: np.ndarray) -> np.ndarray:
    tot = g + b
    lo = np.maximum(0.0, ns - b)
    hi = np.minimum(ns, g)
    out = lo.copy()
    live = np.flatnonzero(lo < hi)
    if not live.size:
        return out
    g, b, ns, lo, hi, tot = (v[live] for v in (g, b, ns, lo, hi, tot))
    m = np.minimum(hi, np.maximum(lo, np.floor((ns + 1.0) * (g + 1.0) / (tot + 2.0))))
    lf = (lgamma(g + 1) - lgamma(m + 1) - lgamma(g - m + 1) + lgamma(b + 1)
          - lgamma(ns - m + 1) - lgamma(b - ns + m + 1) - lgamma(tot + 1) + lgamma(ns + 1)
          + lgamma(tot - ns + 1))
    fm = np.exp(lf)
    U = d.u(e[live]) - fm
    res = m.copy()
    kl, kh, fl, fh = m.copy(), m.copy(), fm.copy(), fm.copy()
    act = np.flatnonzero(U > 0)
    while act.size:
        moved = np.zeros(act.size, bool)
        done = np.zeros(act.size, bool)
        up = kh[act] < hi[act]
        a_ = act[up]
        fh[a_] *= (g[a_] - kh[a_]) * (ns[a_] - kh[a_]) / (
            (kh[a_] + 1) * (b[a_] - ns[a_] + kh[a_] + 1))
        kh[a_] += 1
        U[a_] -= fh[a_]
        moved[up] = True
        hit = up & (U[act] <= 0)
        res[act[hit]] = kh[act[hit]]
        done |= hit
        dn = ~done & (kl[act] > lo[act])
        a_ = act[dn]
        fl[a_] *= kl[a_] * (b[a_] - ns[a_] + kl[a_]) / (
            (g[a_] - kl[a_] + 1) * (ns[a_] - kl[a_] + 1))
        kl[a_] -= 1
        U[a_] -= fl[a_]
        moved[dn] = True
        hit = dn & (U[act] <= 0)
        res[act[hit]] = kl[act[hit]]
        done |= hit
        stuck = ~done & ~moved
        res[act[stuck]] = m[act[stuck]]
        act = act[~(done | stuck)]
    out[live] = res
    return out


def t_chisquare(d: Draws, e: np.ndarray, df: np.ndarray) -> np.ndarray:
    return 2.0 * t_gamma(d, e, 0.5 * df)


def t_noncentral_chisquare(d: Draws, e: np.ndarray, df: np.ndarray,
                           nonc: np.ndarray) -> np.ndarray:
    out = np.zeros(e.size)
    z0 = nonc == 0
    out[z0] = t_chisquare(d, e[z0], df[z0])
    big = ~z0 & (df > 1)
    c = t_chisquare(d, e[big], df[big] - 1.0)
    z = d.normal(e[big]) + np.sqrt(nonc[big])
    out[big] = c + z * z
    sm = ~z0 & ~big
    i = t_poisson(d, e[sm], 0.5 * nonc[sm])
    out[sm] = t_chisquare(d, e[sm], df[sm] + 2.0 * i)
    return out


def t_beta(d: Draws, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(e.size)
    jk = np.flatnonzero((a <= 1) & (b <= 1))
    if jk.size:
        aj, bj = a[jk], b[jk]

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            lu = np.log(d.u(ee)) / aj[pos]
            lv = np.log(d.u(ee)) / bj[pos]
            X, Y = np.exp(lu), np.exp(lv)
            s = X + Y
            lm = np.maximum(lu, lv)
            with _err():
                tiny = np.exp(lu - lm - np.log(np.exp(lu - lm) + np.exp(lv - lm)))
                val = np.where(s > 0, X / s, tiny)
            return s <= 1.0, val

        out[jk] = _loop(e[jk], body)
    gm = np.flatnonzero(~((a <= 1) & (b <= 1)))
    if gm.size:
        X = t_gamma(d, e[gm], a[gm])
        Y = t_gamma(d, e[gm], b[gm])
        out[gm] = X / (X + Y)
    return out


def t_f(d: Draws, e: np.ndarray, dn: np.ndarray, dd: np.ndarray) -> np.ndarray:
    x = t_chisquare(d, e, dn) * dd
    return x / (t_chisquare(d, e, dd) * dn)


def t_noncentral_f(d: Draws, e: np.ndarray, dn: np.ndarray, dd: np.ndarray,
                   nonc: np.ndarray) -> np.ndarray:
    t = t_noncentral_chisquare(d, e, dn, nonc) * dd
    return t / (t_chisquare(d, e, dd) * dn)


def t_standard_t(d: Draws, e: np.ndarray, df: np.ndarray) -> np.ndarray:
    z = d.normal(e)
    return z / np.sqrt(t_chisquare(d, e, df) / df)


def t_standard_cauchy(d: Draws, e: np.ndarray) -> np.ndarray:
    a = d.normal(e)
    return a / d.normal(e)


def t_normal(d: Draws, e: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return loc + scale * d.normal(e)


def t_lognormal(d: Draws, e: np.ndarray, mean: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    return np.exp(mean + sigma * d.normal(e))


def t_uniform(d: Draws, e: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    r = low + (high - low) * d.u(e)
    return np.where(r >= high, np.maximum(low, np.nextafter(high, low)), r)


def t_exponential(d: Draws, e: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return scale * d.expo(e)


def t_gumbel(d: Draws, e: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return loc - scale * np.log(d.expo(e))


def t_laplace(d: Draws, e: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    u = d.u(e)
    with _err():
        return np.where(u < 0.5, loc + scale * np.log(u + u), loc - scale * np.log(2.0 - u - u))


def t_logistic(d: Draws, e: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    u = d.u(e)
    return loc + scale * np.log(u / (1.0 - u))


def t_pareto(d: Draws, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    with _err():
        return np.expm1(d.expo(e) / a)


def t_power(d: Draws, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    return np.power(-np.expm1(-d.expo(e)), 1.0 / a)


def t_rayleigh(d: Draws, e: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return scale * np.sqrt(2.0 * d.expo(e))


def t_weibull(d: Draws, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    out = np.zeros(e.size)
    nz = a != 0
    with _err():
        out[nz] = np.power(d.expo(e[nz]), 1.0 / a[nz])
    return out


def t_triangular(d: Draws, e: np.ndarray, left: np.ndarray, mode: np.ndarray,
                 right: np.ndarray) -> np.ndarray:
    base = right - left
    lb = mode - left
    u = d.u(e)
    with _err():
        return np.where(u <= lb / base, left + np.sqrt(u * lb * base),
                        right - np.sqrt((1.0 - u) * (right - mode) * base))


def t_vonmises(d: Draws, e: np.ndarray, mu: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    PI = np.pi
    r = np.zeros(e.size)
    tiny = kappa < 1e-8
    r[tiny] = PI * (2.0 * d.u(e[tiny]) - 1.0)
    huge = kappa > 1e6
    rh = mu[huge] + np.sqrt(1.0 / kappa[huge]) * d.normal(e[huge])
    rh = np.where(rh < -PI, rh + 2 * PI, rh)
    rh = np.where(rh > PI, rh - 2 * PI, rh)
    mid = np.flatnonzero(~tiny & ~huge)
    if mid.size:
        k = kappa[mid]
        with _err():
            rr = 1.0 + np.sqrt(1.0 + 4.0 * k * k)
            rho = (rr - np.sqrt(2.0 * rr)) / (2.0 * k)
            sp = np.where(k < 1e-5, 1.0 / k + k, (1.0 + rho * rho) / (2.0 * rho))

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            Z = np.cos(PI * d.u(ee))
            W = (1.0 + sp[pos] * Z) / (sp[pos] + Z)
            Y = k[pos] * (sp[pos] - W)
            V = d.u(ee)
            with _err():
                acc = (Y * (2.0 - Y) - V >= 0) | (np.log(Y / V) + 1.0 - Y >= 0)
            return acc, W

        W = _loop(e[mid], body)
        rm = np.arccos(W)
        rm = np.where(d.u(e[mid]) < 0.5, -rm, rm) + mu[mid]
        r[mid] = rm
    m = np.fmod(np.abs(r) + PI, 2.0 * PI) - PI
    out = np.where(r < 0, -m, m)
    out[huge] = rh
    return out


def t_wald(d: Draws, e: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    z = d.normal(e)
    y = mean * z * z
    with _err():
        x = np.where(y > 0.0, mean - 2.0 * mean * y / (y + np.sqrt(4.0 * scale * y + y * y)),
                     mean)
    return np.where(d.u(e) <= mean / (mean + x), x, mean * mean / x)


def t_geometric(d: Draws, e: np.ndarray, p: np.ndarray) -> np.ndarray:
    out = np.ones(e.size)
    lt = p < 1.0
    with _err():
        out[lt] = np.minimum(np.ceil(-d.expo(e[lt]) / np.log1p(-p[lt])), 9.2233720368547748e18)
    return out


def t_logseries(d: Draws, e: np.ndarray, p: np.ndarray) -> np.ndarray:
    r = np.log1p(-p)

    def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
        V = d.u(ee)
        one = V >= p[pos]
        val = np.ones(ee.size)
        acc = one.copy()
        rest = np.flatnonzero(~one)
        q = -np.expm1(r[pos][rest] * d.u(ee[rest]))
        Vr = V[rest]
        sq = Vr <= q * q
        with _err():
            k = np.floor(1.0 + np.log(Vr) / np.log(q))
        val[rest] = np.where(sq, k, np.where(Vr >= q, 1.0, 2.0))
        acc[rest] = ~sq | (k >= 1.0)
        return acc, val

    return _loop(e, body)


def t_zipf(d: Draws, e: np.ndarray, a: np.ndarray) -> np.ndarray:
    # a >= 1025 (infinity too) draws 1, as the kernel does: P(2) / P(1) = 2^-a is below double
    # precision, and there 2^(a - 1) is infinite and the rejection test NaN (it never accepts)
    out = np.ones(e.size)
    keep = np.flatnonzero(a < 1025.0)
    if keep.size:
        am1 = a[keep] - 1.0
        b = np.exp2(am1)

        def body(ee: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, Any]:
            U = 1.0 - d.u(ee)
            V = d.u(ee)
            with _err():
                X = np.floor(np.power(U, -1.0 / am1[pos]))
                ok = (X >= 1.0) & (X <= 9.2233720368547748e18)
                T = np.power(1.0 + 1.0 / X, am1[pos])
                acc = ok & (V * X * (T - 1.0) / (b[pos] - 1.0) <= T / b[pos])
            return acc, X

        out[keep] = _loop(e[keep], body)
    return out


def t_negative_binomial(d: Draws, e: np.ndarray, n: np.ndarray, p: np.ndarray) -> np.ndarray:
    return t_poisson(d, e, t_gamma(d, e, n) * ((1.0 - p) / p))


@dataclass(frozen=True)
class Sampler:
    """A distribution: its parameter names, whether its values are integers (int64) and its
    NumPy twin (the CUDA function is ``gm_s_<name>`` of :data:`CUDA`)."""

    name: str
    params: tuple[str, ...]
    integer: bool
    twin: Callable[..., np.ndarray]


def _table() -> dict[str, Sampler]:
    spec = {
        "gamma": ("a",), "poisson": ("lam",), "binomial": ("n", "p"),
        "hypergeometric": ("ngood", "nbad", "nsample"), "chisquare": ("df",),
        "noncentral_chisquare": ("df", "nonc"), "beta": ("a", "b"), "f": ("dfnum", "dfden"),
        "noncentral_f": ("dfnum", "dfden", "nonc"), "standard_t": ("df",),
        "standard_cauchy": (), "normal": ("loc", "scale"), "lognormal": ("mean", "sigma"),
        "uniform": ("low", "high"), "exponential": ("scale",), "gumbel": ("loc", "scale"),
        "laplace": ("loc", "scale"), "logistic": ("loc", "scale"), "pareto": ("a",),
        "power": ("a",), "rayleigh": ("scale",), "weibull": ("a",),
        "triangular": ("left", "mode", "right"), "vonmises": ("mu", "kappa"),
        "wald": ("mean", "scale"), "geometric": ("p",), "logseries": ("p",), "zipf": ("a",),
        "negative_binomial": ("n", "p"),
    }
    ints = {"poisson", "binomial", "hypergeometric", "geometric", "logseries", "zipf",
            "negative_binomial"}
    return {k: Sampler(k, v, k in ints, globals()[f"t_{k}"]) for k, v in spec.items()}


SAMPLERS = _table()
