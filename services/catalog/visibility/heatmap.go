package visibility

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hebl/gofa"
)

// DaysIn returns the number of UTC days of a year.
func DaysIn(year int) int {
	return int(time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC).Sub(time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC)).Hours() / 24)
}

// Year is the precomputed, source-independent part of a heatmap: the nodes (every 12 hours,
// aligned to UTC midnight and noon) with precession-nutation, aberration and the Sun.
type Year struct {
	site   *Site
	obs    *observer
	year   int
	days   int
	u0     float64
	tab    *nodes
	first  int // index of the node at u0
	era0   []float64
	loGeo  float64 // lower limit as a geometric altitude (refraction removed when configured)
	hiGeo  float64
	cosSun float64
}

// NewYear prepares a year's heatmap computation for the site (about 10 ms).
func NewYear(site *Site, year int) *Year {
	days := DaysIn(year)
	u0 := float64(time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	y := &Year{site: site, obs: newObserver(site), year: year, days: days, u0: u0,
		tab: newNodes(u0, u0+float64(days)*86400), cosSun: math.Cos(site.SunAvoidanceDeg * deg)}
	y.first = int(math.Round((u0 - y.tab.first) / nodeStep))
	y.era0 = make([]float64, days)
	for d := range days {
		y.era0[d] = era(u0 + float64(d)*86400)
	}
	y.loGeo = y.geometric(site.MinElevationDeg * deg)
	y.hiGeo = y.geometric(site.MaxElevationDeg * deg)
	return y
}

// geometric converts an observed (refracted) altitude limit to the geometric altitude at which a
// source reaches it; without refraction they are the same.
func (y *Year) geometric(alt float64) float64 {
	if y.obs.refa == 0 && y.obs.refb == 0 || alt >= math.Pi/2 {
		return alt
	}
	tz := math.Tan(math.Pi/2 - math.Max(alt, 3*deg))
	return alt - (y.obs.refa*tz + y.obs.refb*tz*tz*tz)
}

// Days is the number of days of the year.
func (y *Year) Days() int { return y.days }

// span is a time interval within a day, seconds from 0 h UTC.
type span struct{ a, b float64 }

// Hours computes hours observable per UTC day for each source, in parallel; progress (optional)
// is called after each source. It stops early (returning ctx.Err()) when ctx ends.
func (y *Year) Hours(ctx context.Context, srcs []Source, progress func(done int)) ([][]float64, error) {
	out := make([][]float64, len(srcs))
	for i := range srcs {
		if srcs[i].Kind == KindSolarSystem {
			y.tab.addBody(planets[srcs[i].Body])
		}
	}
	var next, done atomic.Int64
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	memo := map[string][]float64{} // bodies and scans are computed once per distinct definition
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(srcs) || ctx.Err() != nil {
					return
				}
				src := &srcs[i]
				if src.Kind == KindFixed {
					out[i] = y.fixed(src)
				} else {
					key := src.Kind + src.Fingerprint()
					mu.Lock()
					h, ok := memo[key]
					mu.Unlock()
					if !ok {
						h = y.sampled(src)
						mu.Lock()
						memo[key] = h
						mu.Unlock()
					}
					out[i] = append([]float64(nil), h...)
				}
				n := done.Add(1)
				if progress != nil {
					progress(int(n))
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// fixed is the analytic heatmap of a fixed source. Per day: its apparent place at noon (it moves
// < 0.5" in a day); the hour-angle interval in which the altitude is within the limits,
// cos H = (sin h − sin φ sin δ) / (cos φ cos δ), mapped to times through the Earth's rotation
// angle; the Sun condition from the Sun's direction at 0 h, 12 h and 24 h, with cos(separation)
// a quadratic in time (the Sun moves ~1° a day along a great circle), solved exactly where it
// crosses the radius. The two are intersected.
func (y *Year) fixed(src *Source) []float64 {
	hours := make([]float64, y.days)
	pA := src.unitICRS(y.u0)
	pB := pA
	if src.PMRAMasYr != 0 || src.PMDecMasYr != 0 {
		pB = src.unitICRS(y.u0 + float64(y.days)*86400)
	}
	sphi, cphi := y.obs.sphi, y.obs.cphi
	sinLo, sinHi := math.Sin(y.loGeo), math.Sin(y.hiGeo)
	useHi := y.site.MaxElevationDeg < 90
	useSun := y.site.SunAvoidanceDeg > 0
	var elev [4]span
	var sunOK [2]span
	var p [3]float64
	for d := range y.days {
		f := (float64(d) + 0.5) / float64(y.days)
		for k := range 3 {
			p[k] = pA[k] + f*(pB[k]-pA[k])
		}
		n0 := &y.tab.n[y.first+2*d]
		noon := &y.tab.n[y.first+2*d+1]
		n1 := &y.tab.n[y.first+2*d+2]
		c := apparentFast(p, &noon.astrom)
		sd := c[2]
		cd := math.Sqrt(c[0]*c[0] + c[1]*c[1])
		alpha := math.Atan2(c[1], c[0])
		// elevation: allowed hour angles |h| ≤ H (and |h| ≥ Hhi below an upper limit)
		ne := 0
		den := cphi * cd
		cosH := func(sinAlt float64) float64 {
			if den < 1e-12 {
				if sinAlt <= sphi*sd {
					return -2
				}
				return 2
			}
			return (sinAlt - sphi*sd) / den
		}
		h0 := math.Remainder(y.era0[d]+y.obs.elong-alpha, 2*math.Pi)
		cLo := cosH(sinLo)
		if cLo <= -1 {
			elev[0], ne = span{0, 86400}, 1
		} else if cLo < 1 {
			ne = hourAngleSpans(h0, math.Acos(cLo), elev[:])
		}
		if useHi && ne > 0 {
			if cHi := cosH(sinHi); cHi < 1 {
				var hi [4]span
				nh := 1
				hi[0] = span{0, 86400}
				if cHi > -1 {
					nh = hourAngleSpans(h0, math.Acos(cHi), hi[:])
				}
				ne = subtract(elev[:ne], hi[:nh], elev[:])
			}
		}
		if ne == 0 {
			continue
		}
		// Sun: sep ≥ R ⇔ c·s ≤ cos R, with c·s(τ) quadratic over the day
		ns := 1
		sunOK[0] = span{0, 86400}
		if useSun {
			q0 := dot(c, n0.sunC) - y.cosSun
			q1 := dot(c, noon.sunC) - y.cosSun
			q2 := dot(c, n1.sunC) - y.cosSun
			ns = belowZero(q0, q1, q2, sunOK[:])
		}
		total := 0.0
		for _, e := range elev[:ne] {
			for _, s := range sunOK[:ns] {
				if a, b := math.Max(e.a, s.a), math.Min(e.b, s.b); b > a {
					total += b - a
				}
			}
		}
		hours[d] = total / 3600
	}
	return hours
}

func dot(a, b [3]float64) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }

// apparentFast is apparent for the heatmap: first-order annual aberration (within 0.002" of SOFA
// Ab) and no light deflection (under 0.01" outside the Sun-avoidance radius).
func apparentFast(p [3]float64, as *gofa.ASTROM) (c [3]float64) {
	pv := dot(p, as.V)
	var q [3]float64
	for i := range 3 {
		q[i] = p[i] + as.V[i] - p[i]*pv
	}
	gofa.Rxp(as.Bpn, q, &c)
	norm(&c)
	return c
}

// hourAngleSpans maps the hour angles |h| ≤ H (h = h0 + ω t, periodic) to times in [0, 86400).
func hourAngleSpans(h0, H float64, out []span) int {
	n := 0
	for k := range 3 {
		a := (-H - h0 + 2*math.Pi*float64(k)) / eraRate
		b := (H - h0 + 2*math.Pi*float64(k)) / eraRate
		a, b = math.Max(a, 0), math.Min(b, 86400)
		if b > a {
			if n > 0 && a <= out[n-1].b {
				out[n-1].b = b
				continue
			}
			out[n] = span{a, b}
			n++
		}
	}
	return n
}

// subtract removes the spans of cut from in (sorted, disjoint), writing to out; returns the count.
func subtract(in, cut []span, out []span) int {
	var res [8]span
	n := 0
	for _, s := range in {
		segs := []span{s}
		for _, c := range cut {
			var next []span
			for _, g := range segs {
				if c.b <= g.a || c.a >= g.b {
					next = append(next, g)
					continue
				}
				if c.a > g.a {
					next = append(next, span{g.a, c.a})
				}
				if c.b < g.b {
					next = append(next, span{c.b, g.b})
				}
			}
			segs = next
		}
		for _, g := range segs {
			if n < len(res) {
				res[n] = g
				n++
			}
		}
	}
	n = min(n, len(out))
	copy(out, res[:n])
	return n
}

// belowZero returns the parts of the day where the quadratic through q0 (0 h), q1 (12 h) and
// q2 (24 h) is ≤ 0.
func belowZero(q0, q1, q2 float64, out []span) int {
	// far from zero the day is all in or all out: the quadratic bends by < 1e-3 in a day
	const clear = 1e-2
	if q0 < -clear && q1 < -clear && q2 < -clear {
		out[0] = span{0, 86400}
		return 1
	}
	if q0 > clear && q1 > clear && q2 > clear {
		return 0
	}
	// q(τ) = A τ² + B τ + C, τ in days
	C := q0
	B := 4*q1 - 3*q0 - q2
	A := 2*q2 + 2*q0 - 4*q1
	var cuts [4]float64
	nc := 1
	add := func(r float64) {
		if r > 0 && r < 1 {
			cuts[nc] = r
			nc++
		}
	}
	if math.Abs(A) < 1e-15 {
		if B != 0 {
			add(-C / B)
		}
	} else if disc := B*B - 4*A*C; disc >= 0 {
		qq := -0.5 * (B + math.Copysign(math.Sqrt(disc), B))
		if qq != 0 {
			r1, r2 := qq/A, C/qq
			add(math.Min(r1, r2))
			add(math.Max(r1, r2))
		}
	}
	cuts[nc] = 1
	nc++
	n := 0
	for i := 0; i+1 < nc; i++ {
		m := (cuts[i] + cuts[i+1]) / 2
		if A*m*m+B*m+C <= 0 {
			a, b := cuts[i]*86400, cuts[i+1]*86400
			if n > 0 && out[n-1].b >= a {
				out[n-1].b = b
			} else if n < len(out) {
				out[n] = span{a, b}
				n++
			}
		}
	}
	return n
}

// sampled is the heatmap of a solar-system body or a constant-elevation scan: windows searched on
// a 10-minute grid with root-found edges (as Compute), summed per UTC day.
func (y *Year) sampled(src *Source) []float64 {
	u1 := y.u0 + float64(y.days)*86400
	tr := newTrackOn(y.site, src, y.tab, y.obs)
	c := newConstraints(y.site, nil, nil, nil, src, nil)
	first, events := scan(tr, &c, y.u0, u1, maxScanStep, nil, nil)
	wins, _ := windowsFrom(&c, first, events, y.u0, u1)
	hours := make([]float64, y.days)
	for _, w := range wins {
		for a := w.start; a < w.end; {
			d := int((a - y.u0) / 86400)
			if d >= y.days {
				break
			}
			b := math.Min(w.end, y.u0+float64(d+1)*86400)
			hours[d] += (b - a) / 3600
			a = b
		}
	}
	return hours
}
