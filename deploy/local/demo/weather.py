#!/usr/bin/env python3
"""Generate the demo weather series of obsops (PWV at the FYST site): `make up` runs it and loads
its output with `site admin load-weather` (deploy/local/stack.sh). Standard library only; the same
--seed and --now give the same series.

The model (a statistical stand-in, not data): log(PWV) is an Ornstein-Uhlenbeck process around a
median of 1.0 mm with a correlation time of 12 h and a stationary spread of 0.45 in log (so PWV
ranges over about 0.3-3 mm, as at Cerro Chajnantor's 5600 m in the dry season), modulated by a
diurnal cycle (+/-20 %, highest at 19 UTC, the site's mid-afternoon) — the shape of the published
APEX/Chajnantor radiometer statistics, not their values.
- measurements: the "radiometer" every 10 minutes over the --past hours before now, with 2 %
  instrument noise;
- forecasts: two runs of the "forecast model" issued at the last two 6-hourly synoptic times
  (00/06/12/18 UTC) before now, hourly points from their issue time to --future hours after now;
  each follows the same process forward from what was measured at its issue time, with an error
  growing with lead time (8 % + 6 % per day), so the newer run is the better one.
Output: the body of POST /api/site/weather ({"items": [...]}) on stdout.
"""
import argparse
import datetime as dt
import json
import math
import random

MEDIAN, SIGMA, TAU_H = 1.0, 0.45, 12.0


def diurnal(t):
    hours = t.hour + t.minute / 60
    return 0.20 * math.cos(2 * math.pi * (hours - 19) / 24)


def ou_path(rng, start_log, t0, t1, step):
    """An Ornstein-Uhlenbeck path of log(PWV/median) (without the diurnal term) from t0 to t1."""
    a = math.exp(-step.total_seconds() / 3600 / TAU_H)
    s = SIGMA * math.sqrt(1 - a * a)
    x, t, out = start_log, t0, []
    while t <= t1:
        out.append((t, x))
        x = a * x + rng.gauss(0, s)
        t += step
    return out


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--now", help="UTC time the series is generated for (RFC 3339; default now)")
    p.add_argument("--seed", type=int, default=26)
    p.add_argument("--past", type=int, default=72, help="hours of measurements before now")
    p.add_argument("--future", type=int, default=72, help="hours of forecast after now")
    a = p.parse_args()
    now = dt.datetime.now(dt.timezone.utc) if not a.now else dt.datetime.fromisoformat(a.now.replace("Z", "+00:00"))
    now = now.replace(second=0, microsecond=0)
    rng = random.Random(a.seed)
    ten = dt.timedelta(minutes=10)
    start = now - dt.timedelta(hours=a.past)
    start = start - dt.timedelta(minutes=start.minute % 10)
    truth = ou_path(rng, rng.gauss(0, SIGMA), start, now, ten)
    items = []
    for t, x in truth:
        pwv = MEDIAN * math.exp(x + diurnal(t)) * (1 + rng.gauss(0, 0.02))
        items.append({"kind": "measurement", "time": iso(t), "pwv_mm": round(max(pwv, 0.05), 3), "source": "radiometer"})
    last_synoptic = now.replace(minute=0) - dt.timedelta(hours=now.hour % 6)
    for issued in (last_synoptic - dt.timedelta(hours=6), last_synoptic):
        # the run starts from the measured state at its issue time
        x0 = min(truth, key=lambda p: abs((p[0] - issued).total_seconds()))[1]
        path = ou_path(rng, x0, issued, now + dt.timedelta(hours=a.future), dt.timedelta(hours=1))
        for t, x in path:
            lead_days = (t - issued).total_seconds() / 86400
            err = rng.gauss(0, 0.08 + 0.06 * lead_days)
            pwv = MEDIAN * math.exp(x + diurnal(t) + err)
            items.append({"kind": "forecast", "time": iso(t), "pwv_mm": round(max(pwv, 0.05), 3),
                          "source": "forecast model", "issued_at": iso(issued)})
    json.dump({"items": items}, __import__("sys").stdout, indent=None)


if __name__ == "__main__":
    main()
