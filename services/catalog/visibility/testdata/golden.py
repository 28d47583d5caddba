#!/usr/bin/env python3
"""Golden topocentric positions for the visibility engine's tests (golden.csv).

Run from this directory:  python3 golden.py > golden.csv
                          python3 golden.py refraction > golden_refraction.csv
                          python3 golden.py constraints > golden_constraints.csv
Needs Debian's python3-astropy (5.2). Conventions, matching the engine's defaults:
  * IERS auto-download off; UT1 = UTC; polar motion zero (astropy's fallback is 0.035", 0.29");
  * no refraction (pressure 0), geometric altitude; azimuth from north through east;
  * site: FYST, latitude -22.985639, longitude -67.740278 (east positive), 5611.8 m (WGS84);
  * fixed sources: ICRS at the given epoch, proper motion applied with SkyCoord.apply_space_motion
    (ERFA pmsafe, no parallax, no radial velocity), pm_ra is mu_alpha* = dRA/dt cos(dec);
  * Sun, Moon and planets from astropy's built-in ephemeris (ERFA epv00, moon98, plan94) via
    get_body with the site as observer (light time and topocentric parallax included);
  * sun_sep_deg is the angle between the source and the Sun, both topocentric (AltAz frame).
"""
import sys
import warnings

import numpy as np
from astropy import units as u
from astropy.coordinates import AltAz, EarthLocation, SkyCoord, get_body
from astropy.coordinates import erfa_astrom
from astropy.coordinates.builtin_frames import intermediate_rotation_transforms, utils
from astropy.time import Time
from astropy.utils import iers

iers.conf.auto_download = False
iers.conf.iers_degraded_accuracy = "ignore"
warnings.simplefilter("ignore")


def _no_polar_motion(time):
    z = np.zeros(np.shape(time.jd1))
    return z, z


for mod in (erfa_astrom, intermediate_rotation_transforms, utils):
    mod.get_polar_motion = _no_polar_motion

SITE = EarthLocation.from_geodetic(lon=-67.740278 * u.deg, lat=-22.985639 * u.deg, height=5611.8 * u.m)

# name, ra_deg, dec_deg, pm_ra_mas_yr (mu_alpha*), pm_dec_mas_yr, epoch (Julian year)
STARS = [
    ("sirius", 101.28715533, -16.71611586, 0, 0, 2000.0),  # dec -17: passes near the zenith
    ("canopus", 95.98795778, -52.69566139, 0, 0, 2000.0),
    ("vega", 279.23473479, 38.78368896, 0, 0, 2000.0),  # low in the north
    ("betelgeuse", 88.79293899, 7.40706399, 0, 0, 2000.0),
    ("beta_hyi", 6.43779233, -77.25424612, 0, 0, 2000.0),  # circumpolar here
    ("sigma_oct", 317.19536208, -88.95650317, 0, 0, 2000.0),  # near the south celestial pole
    ("polaris", 37.95456067, 89.26410897, 0, 0, 2000.0),  # never rises here
    ("kochab", 222.67635750, 74.15550394, 0, 0, 2000.0),  # never rises here
    ("barnard", 269.45207511, 4.69339089, -798.58, 10328.12, 2000.0),  # high proper motion
    ("gaia_epoch", 83.63308333, 22.01450000, 120.0, -340.0, 2016.0),  # pm at another epoch
]
BODIES = ["sun", "moon", "jupiter", "mars"]


def times(seed, n):
    rng = np.random.default_rng(seed)
    lo = Time("2024-01-01T00:00:00", scale="utc").unix
    hi = Time("2027-12-31T00:00:00", scale="utc").unix
    secs = np.round(rng.uniform(lo, hi, n), 3)  # millisecond times, exact in the CSV
    t = Time(secs, format="unix", scale="utc")
    t.delta_ut1_utc = np.zeros(n)
    return t


def altaz(t):
    return AltAz(obstime=t, location=SITE, pressure=0 * u.hPa)


# refraction conditions of the engine's defaults with OPS_SITE_REFRACTION=true: pressure from the
# elevation (standard atmosphere), 0 °C, 20 % humidity, 850 µm (SOFA's radio formula)
PRESSURE_HPA = 1013.25 * np.exp(-5611.8 / 8149.9415)


def refraction():
    """Stars above 3° with refraction on: observed (refracted) altitude and azimuth."""
    out = sys.stdout
    out.write(f"# pressure_hpa={PRESSURE_HPA:.6f} temperature_c=0 relative_humidity=0.2 wavelength_um=850\n")
    out.write("name,ra_deg,dec_deg,utc,alt_deg,az_deg\n")
    seed = 100
    for name, ra, dec, pmra, pmdec, epoch in STARS:
        if pmra or pmdec:
            continue
        t = times(seed, 60)
        seed += 1
        frame = AltAz(obstime=t, location=SITE, pressure=PRESSURE_HPA * u.hPa, temperature=0 * u.deg_C,
                      relative_humidity=0.2, obswl=850 * u.um)
        aa = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, frame="icrs").transform_to(frame)
        for i in range(len(t)):
            if aa.alt.deg[i] > 3:
                out.write(f"{name},{ra},{dec},{t[i].isot}Z,{aa.alt.deg[i]:.9f},{aa.az.deg[i]:.9f}\n")


def constraints():
    """Obs-unit constraints' quantities for fixed stars: airmass (sec z, astropy's AltAz.secz, above
    the horizon only), the topocentric angle to the Moon (both in the AltAz frame, as sun_sep_deg)
    and the local mean sidereal time (Time.sidereal_time('mean'), IAU 2006, UT1 = UTC)."""
    out = sys.stdout
    out.write("name,ra_deg,dec_deg,utc,alt_deg,airmass,moon_sep_deg,lst_hours\n")
    seed = 200
    for name, ra, dec, pmra, pmdec, epoch in STARS:
        if pmra or pmdec:
            continue
        t = times(seed, 25)
        seed += 1
        frame = altaz(t)
        aa = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, frame="icrs").transform_to(frame)
        moon = get_body("moon", t, SITE).transform_to(frame)
        sep = aa.separation(moon)
        lst = t.sidereal_time("mean", longitude=SITE.lon)
        secz = aa.secz
        for i in range(len(t)):
            am = f"{float(secz[i]):.9f}" if aa.alt.deg[i] > 0 else ""
            out.write(f"{name},{ra},{dec},{t[i].isot}Z,{aa.alt.deg[i]:.9f},{am},{sep.deg[i]:.9f},{lst.hour[i]:.12f}\n")


def main():
    if sys.argv[1:] == ["refraction"]:
        refraction()
        return
    if sys.argv[1:] == ["constraints"]:
        constraints()
        return
    out = sys.stdout
    out.write("name,kind,ra_deg,dec_deg,pm_ra_mas_yr,pm_dec_mas_yr,epoch,body,utc,alt_deg,az_deg,sun_sep_deg\n")
    seed = 1
    for name, ra, dec, pmra, pmdec, epoch in STARS:
        t = times(seed, 20)
        seed += 1
        frame = altaz(t)
        c = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, pm_ra_cosdec=pmra * u.mas / u.yr,
                     pm_dec=pmdec * u.mas / u.yr, frame="icrs",
                     obstime=Time(epoch, format="jyear", scale="tdb"))
        if pmra or pmdec:
            m = c.apply_space_motion(new_obstime=t)
            c = SkyCoord(ra=m.ra, dec=m.dec, frame="icrs")  # position at t; velocities dropped
        else:
            c = SkyCoord(ra=ra * u.deg, dec=dec * u.deg, frame="icrs")
        aa = c.transform_to(frame)
        sun = get_body("sun", t, SITE).transform_to(frame)
        sep = aa.separation(sun)
        for i in range(len(t)):
            out.write(f"{name},fixed,{ra},{dec},{pmra},{pmdec},{epoch},,{t[i].isot}Z,"
                      f"{aa.alt.deg[i]:.9f},{aa.az.deg[i]:.9f},{sep.deg[i]:.9f}\n")
    for body in BODIES:
        t = times(seed, 20 if body in ("sun", "moon") else 15)
        seed += 1
        frame = altaz(t)
        aa = get_body(body, t, SITE).transform_to(frame)
        sun = get_body("sun", t, SITE).transform_to(frame)
        sep = aa.separation(sun)
        for i in range(len(t)):
            out.write(f"{body},solar_system,,,,,,{body},{t[i].isot}Z,"
                      f"{aa.alt.deg[i]:.9f},{aa.az.deg[i]:.9f},{sep.deg[i]:.9f}\n")


if __name__ == "__main__":
    main()
