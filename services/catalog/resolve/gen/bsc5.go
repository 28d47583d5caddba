package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// bscStar is what the generator takes of one record of the Yale Bright Star Catalogue, 5th
// revised edition (VizieR V/50, file catalog; byte positions from its ReadMe).
type bscStar struct {
	hr, hd   int
	ra, dec  float64 // J2000 (FK5), degrees
	vmag     float64 // NaN when blank
	pmRA     int     // mu_alpha* = dRA/dt cos(dec), J2000, FK5, mas/yr (the catalogue gives arcsec/yr to 0.001)
	pmDec    int     // mas/yr
	hasVmag  bool
	position bool
}

// readBSC5 reads the catalogue's fixed-width records: HR (bytes 1-4), HD (26-31), RA J2000
// (76-83), Dec J2000 (84-90), Vmag (103-107), pmRA (149-154) and pmDE (155-160), both in
// arcsec/yr, pmRA already multiplied by cos(dec) (alpha Cen A, HR 5459: -3.642 at dec -61 deg,
// against Hipparcos's mu_alpha* of -3679 mas/yr).
func readBSC5(path string) ([]bscStar, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []bscStar
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		t := sc.Text()
		if len(t) < 160 {
			return nil, fmt.Errorf("%s line %d: %d bytes, want at least 160", path, line, len(t))
		}
		field := func(a, b int) string { return strings.TrimSpace(t[a-1 : b]) }
		var s bscStar
		var errs [8]error
		s.hr, errs[0] = strconv.Atoi(field(1, 4))
		s.hd, errs[1] = strconv.Atoi(field(26, 31))
		if field(76, 77) != "" {
			s.position = true
			h, e1 := strconv.Atoi(field(76, 77))
			m, e2 := strconv.Atoi(field(78, 79))
			sec, e3 := strconv.ParseFloat(field(80, 83), 64)
			d, e4 := strconv.Atoi(field(85, 86))
			dm, e5 := strconv.Atoi(field(87, 88))
			ds, e6 := strconv.Atoi(field(89, 90))
			for _, e := range []error{e1, e2, e3, e4, e5, e6} {
				if e != nil {
					errs[2] = e
				}
			}
			s.ra = (float64(h) + float64(m)/60 + sec/3600) * 15
			s.dec = float64(d) + float64(dm)/60 + float64(ds)/3600
			if t[83] == '-' {
				s.dec = -s.dec
			}
		}
		s.vmag = math.NaN()
		if v := field(103, 107); v != "" {
			s.vmag, errs[3] = strconv.ParseFloat(v, 64)
			s.hasVmag = true
		}
		s.pmRA, errs[4] = milli(t[148:154])
		s.pmDec, errs[5] = milli(t[154:160])
		for _, e := range errs {
			if e != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, line, e)
			}
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// milli turns a proper motion field such as "-1.093", "+0.008" or " 0.000" (arcsec/yr) into
// an exact number of mas/yr.
func milli(s string) (int, error) {
	s = strings.TrimSpace(s)
	if len(s) < 5 || s[len(s)-4] != '.' {
		return 0, fmt.Errorf("proper motion %q: want [+-]d.ddd", s)
	}
	return strconv.Atoi(strings.Replace(s, ".", "", 1))
}

// Tolerances of the join: BSC5 gives RA to 0.1 s and Dec to 1", d3-celestial to 1e-4 deg; a
// match by HD number must agree within hdSepArcsec, a match by position alone (stars whose HD
// number d3-celestial does not give) within posSepArcsec and magMax magnitudes, with no other
// BSC5 star within ambiguousArcsec.
const (
	hdSepArcsec     = 30
	posSepArcsec    = 5
	magMax          = 0.3
	ambiguousArcsec = 30
)

// joinBSC5 finds the BSC5 record of d3-celestial's stars (keyed by HIP number): by HD number
// when d3-celestial gives one (checked against the position), otherwise by position and
// magnitude. A BSC5 record goes to one star at most.
func joinBSC5(stars []point, names map[string]map[string]any, bsc []bscStar) (map[int]bscStar, error) {
	byHD := map[int]int{}
	for i, b := range bsc {
		byHD[b.hd] = i
	}
	// a coarse grid of the sky (1 deg in dec) for the positional match
	grid := map[int][]int{}
	for i, b := range bsc {
		if b.position {
			k := int(math.Floor(b.dec))
			grid[k] = append(grid[k], i)
		}
	}
	used := map[int]int{} // BSC5 index -> HIP
	out := map[int]bscStar{}
	claim := func(h, i int) {
		if prev, ok := used[i]; ok {
			// two d3-celestial stars on one BSC5 record (a close pair): keep neither
			delete(out, prev)
			return
		}
		used[i] = h
		out[h] = bsc[i]
	}
	byHDCount, byPos := 0, 0
	for _, f := range stars {
		h := hip(f)
		ra0, dec0 := ra(f.Geometry.Coordinates[0]), f.Geometry.Coordinates[1]
		if n, ok := names[strconv.Itoa(h)]; ok {
			if s, _ := n["hd"].(string); s != "" {
				num, err := strconv.Atoi(strings.TrimPrefix(clean(s), "HD "))
				if err != nil {
					return nil, fmt.Errorf("HIP %d: HD number %q", h, s)
				}
				if i, ok := byHD[num]; ok && bsc[i].position {
					if sep := sepArcsec(ra0, dec0, bsc[i].ra, bsc[i].dec); sep > hdSepArcsec {
						return nil, fmt.Errorf("HIP %d = HD %d = HR %d, but the positions differ by %.0f\"", h, num, bsc[i].hr, sep)
					}
					claim(h, i)
					byHDCount++
					continue
				}
			}
		}
		mag, _ := f.Props["mag"].(float64)
		best, bestSep, near := -1, math.Inf(1), 0
		for k := int(math.Floor(dec0)) - 1; k <= int(math.Floor(dec0))+1; k++ {
			for _, i := range grid[k] {
				sep := sepArcsec(ra0, dec0, bsc[i].ra, bsc[i].dec)
				if sep <= ambiguousArcsec {
					near++
				}
				if sep < bestSep {
					best, bestSep = i, sep
				}
			}
		}
		if best >= 0 && bestSep <= posSepArcsec && near == 1 && bsc[best].hasVmag && math.Abs(bsc[best].vmag-mag) <= magMax {
			claim(h, best)
			byPos++
		}
	}
	fmt.Fprintf(os.Stderr, "gen: BSC5 proper motions for %d of %d stars (%d by HD number, %d by position)\n",
		len(out), len(stars), byHDCount, byPos)
	return out, nil
}

// sepArcsec is the angle between two positions in degrees, in arcseconds.
func sepArcsec(ra1, dec1, ra2, dec2 float64) float64 {
	const d = math.Pi / 180
	s := math.Sin((dec2-dec1)*d/2)*math.Sin((dec2-dec1)*d/2) +
		math.Cos(dec1*d)*math.Cos(dec2*d)*math.Sin((ra2-ra1)*d/2)*math.Sin((ra2-ra1)*d/2)
	return 2 * math.Asin(math.Sqrt(s)) / d * 3600
}
