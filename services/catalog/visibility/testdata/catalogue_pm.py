#!/usr/bin/env python3
"""Golden ICRS positions at 2026-01-01T00:00:00 UTC of offline-catalogue stars with proper motion
(catalogue_pm.csv), for TestCatalogueStarsProperMotion.

Run from this directory:  /usr/bin/python3 catalogue_pm.py > catalogue_pm.csv
Needs Debian's python3-astropy (5.2). Reads the stars' J2000.0 positions and BSC5 proper motions
from ../../resolve/data/catalogue.tsv (the shipped catalogue) and moves them with
SkyCoord.apply_space_motion (ERFA pmsafe; no parallax, no radial velocity), as golden.py does;
pm_ra is mu_alpha* = dRA/dt cos(dec). The input values are written too, so the test notices a
regenerated catalogue.
"""
import warnings

from astropy import units as u
from astropy.coordinates import SkyCoord
from astropy.time import Time

warnings.simplefilter("ignore")

NAMES = ["Arcturus", "Sirius", "Procyon", "61 Cyg", "Ran", "Rigil Kentaurus", "Vega", "Polaris"]
AT = Time("2026-01-01T00:00:00", scale="utc")

rows = {}
with open("../../resolve/data/catalogue.tsv") as f:
    for line in f:
        p = line.rstrip("\n").split("\t")
        if p[0] == "O" and p[1] in NAMES and len(p) == 11:
            rows[p[1]] = p

print("name,ra_deg,dec_deg,pm_ra_mas_yr,pm_dec_mas_yr,epoch,ra_2026_deg,dec_2026_deg")
for name in NAMES:
    p = rows[name]
    ra, dec, pmra, pmdec, epoch = float(p[2]), float(p[3]), float(p[8]), float(p[9]), float(p[10])
    c = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, pm_ra_cosdec=pmra * u.mas / u.yr,
                 pm_dec=pmdec * u.mas / u.yr, frame="icrs",
                 obstime=Time(epoch, format="jyear", scale="tdb"))
    m = c.apply_space_motion(new_obstime=AT)
    print(f"{name},{p[2]},{p[3]},{p[8]},{p[9]},{p[10]},{m.ra.deg:.10f},{m.dec.deg:.10f}")
