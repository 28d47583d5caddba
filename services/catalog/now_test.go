package catalog_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// nowItem is one obs unit of GET /visibility/now.
type nowItem struct {
	Rank                  int        `json:"rank"`
	ObsUnitID             int64      `json:"obs_unit_id"`
	ObsUnitName           string     `json:"obs_unit_name"`
	ProgramShortName      string     `json:"program_short_name"`
	Priority              *int       `json:"priority"`
	Observable            bool       `json:"observable"`
	NotObservableBecause  []string   `json:"not_observable_because"`
	UnknownConstraints    []string   `json:"unknown_constraints"`
	NextReason            string     `json:"next_reason"`
	ObservableUntil       *time.Time `json:"observable_until"`
	ObservableForS        *float64   `json:"observable_for_s"`
	UntilReason           string     `json:"until_reason"`
	NextObservable        *time.Time `json:"next_observable"`
	AltDeg                float64    `json:"alt_deg"`
	PWVMarginMM           *float64   `json:"pwv_margin_mm"`
	DurationS             float64    `json:"duration_s"`
	ExecutedS             float64    `json:"executed_s"`
	RemainingS            float64    `json:"remaining_s"`
	ProgramAllocatedHours *float64   `json:"program_allocated_hours"`
	ProgramExecutedHours  float64    `json:"program_executed_hours"`
	ProgramRemainingHours *float64   `json:"program_remaining_hours"`
}

type nowRanking struct {
	At    time.Time `json:"at"`
	Total int       `json:"total"`
	Limit int       `json:"limit"`
	Rule  string    `json:"rule"`
	Items []nowItem `json:"items"`
}

// TestNowRanking: GET /visibility/now on a fixed night, against a ranking worked out by hand.
//
// The time: 2026-03-01T03:00:00Z at the FYST site (φ = −22.9856°, λ = −67.7403°, limits 20°–90°,
// Sun avoidance 45°). D = 9555.625 days from J2000.0, GMST = 18.697374558 h + 24.06570982441908 h
// × D = 13.5958 h (mod 24), LST = GMST + λ/15 = 9.0798 h. The Sun (RA ≈ 22.8 h, δ ≈ −8°) is at
// hour angle ≈ 10.3 h, far below the horizon and more than 90° from every source below.
//
// The sources (J2000; precession to 2026 moves them by about a minute of RA, so the hand times
// hold to a few minutes): TRANSIT RA 9.08 h δ −23° (hour angle 0: in the zenith), WEST RA 5.08 h
// δ −23° (HA +4 h, setting), EAST RA 13.08 h δ −23° (HA −4 h, rising), NORTH RA 9.08 h δ +60°
// (highest altitude 90° − |φ − δ| = 7°: never above 20°).
//
// When a δ = −23° source reaches altitude h: cos H = (sin h − sin φ sin δ) / (cos φ cos δ); for
// h = 20°, H = 5.1388 sidereal hours, for h = 80° (one unit's own limit) H = 0.7244. A source at
// hour angle HA sets after (H − HA) / 1.0027379 hours:
//
//	TRANSIT above 80°: (0.7244 − 0)/1.0027 = 0.7226 h → 03:43:21
//	WEST above 20°:    (5.1388 − 4)/1.0027 = 1.1359 h → 04:08:09
//	TRANSIT above 20°: (5.1388 − 0)/1.0027 = 5.1250 h → 08:07:30
//	EAST above 20°:    (5.1388 + 4)/1.0027 = 9.1141 h → 12:06:50
//
// The units (programs NOW-A and NOW-B active, NOW-C draft: not ranked):
//
//	A west       WEST,    priority 2, 3600 s
//	A transit    TRANSIT, priority 2, 3600 s
//	A north      NORTH,   priority 1, 3600 s            not observable (min_elevation_deg), never within 24 h
//	A done       WEST,    priority 1, 1800 s, executed 1800 s: nothing remaining
//	A lst        TRANSIT, priority 1, lst_range 12 h → 14 h: not observable now (LST 9.08 h); observable
//	             from LST 12 h: (12 − 9.0798)/1.0027 = 2.9122 h → 05:54:44 (TRANSIT is then at hour angle
//	             2.9 h, above 20°)
//	B zenith     TRANSIT, priority 1, own min_elevation_deg 80
//	B east-a     EAST,    priority 2, 7200 s, executed 3600 s (and a failed execution, not counted)
//	B east-b     EAST,    priority 2, 7200 s
//	B east-none  EAST,    no priority
//	B wet        EAST,    priority 3, max_pwv_mm 1: no PWV reading then (unknown: counts as met)
//	C transit    TRANSIT, priority 1 (draft program)
//
// The rule: observable with time remaining first; priority, lower first, none last; the window
// ending soonest; the least remaining time; id. So:
//
//  1. B zenith     observable, priority 1, until 03:43
//  2. A west       priority 2, until 04:08
//  3. A transit    priority 2, until 08:07
//  4. B east-a     priority 2, until 12:07, 3600 s remaining
//  5. B east-b     priority 2, until 12:07, 7200 s remaining
//  6. B wet        priority 3
//  7. B east-none  no priority
//  8. A lst        not observable, priority 1, observable from 05:55
//  9. A done       observable but nothing remaining: with the unobservable; priority 1, never
//     observable "next" (it is now), 0 s left
//  10. A north     not observable, priority 1, never within 24 h, 3600 s left
func TestNowRanking(t *testing.T) {
	e := startEnv(t, nil)
	src := func(name string, ra, dec float64) int64 {
		return e.createSource(t, map[string]any{"name": name, "kind": "fixed", "ra_deg": ra, "dec_deg": dec})
	}
	transit, west, east, north := src("NOW TRANSIT", 9.08*15, -23), src("NOW WEST", 5.08*15, -23), src("NOW EAST", 13.08*15, -23), src("NOW NORTH", 9.08*15, 60)
	u := func(name string, source int64, prio any, duration float64) map[string]any {
		m := unit(name, source, 11, duration)
		if prio != nil {
			m["priority"] = prio
		}
		return m
	}
	zenith := u("zenith", transit, 1, 3600)
	zenith["min_elevation_deg"] = 80.0
	lst := u("lst", transit, 1, 3600)
	lst["lst_range"] = map[string]any{"start_hours": 12, "end_hours": 14}
	wet := u("wet", east, 3, 3600)
	wet["max_pwv_mm"] = 1.0
	create := func(body map[string]any) program {
		r := e.call(t, http.MethodPost, e.gw("/observing_program/"), e.observer, body)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		var p program
		r.JSON(t, &p)
		return p
	}
	a := create(e.programBody("NOW-A", u("west", west, 2, 3600), u("transit", transit, 2, 3600), u("north", north, 1, 3600), u("done", west, 1, 1800), lst))
	bBody := e.programBody("NOW-B", zenith, u("east-a", east, 2, 7200), u("east-b", east, 2, 7200), u("east-none", east, nil, 7200), wet)
	delete(bBody, "allocated_hours")
	b := create(bBody)
	cBody := e.programBody("NOW-C", u("transit", transit, 1, 3600))
	cBody["status"] = "draft"
	create(cBody)

	// committed executions, as ingest's worker writes them
	exec := func(obsUnit int64, status string, start time.Time, d time.Duration) {
		_, err := e.db.Exec(`INSERT INTO executed_obs_units (id, obs_unit_id, instrument_module_id, site, status, start_time, end_time)
			VALUES ($1, $2, 11, 'fyst', $3, $4, $5)`, uuid.NewString(), obsUnit, status, start, start.Add(d))
		require.NoError(t, err)
	}
	night := time.Date(2026, 2, 28, 2, 0, 0, 0, time.UTC)
	exec(a.ObsUnits[3].ID, "completed", night, 30*time.Minute) // A done
	exec(b.ObsUnits[1].ID, "completed", night, time.Hour)      // B east-a
	exec(b.ObsUnits[1].ID, "failed", night.Add(2*time.Hour), time.Hour)

	r := e.call(t, http.MethodGet, e.gw("/visibility/now?at=2026-03-01T03:00:00Z&limit=100"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var got nowRanking
	r.JSON(t, &got)
	require.Equal(t, 10, got.Total, "the draft program's unit is not ranked: %s", r.Body)
	var order []string
	for _, it := range got.Items {
		order = append(order, it.ProgramShortName[len("NOW-"):]+" "+it.ObsUnitName)
	}
	require.Equal(t, []string{"B zenith", "A west", "A transit", "B east-a", "B east-b", "B wet", "B east-none", "A lst", "A done", "A north"}, order)

	at := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	hand := func(hms string) time.Time {
		tm, err := time.Parse("15:04:05", hms)
		require.NoError(t, err)
		return at.Truncate(24 * time.Hour).Add(time.Duration(tm.Hour())*time.Hour + time.Duration(tm.Minute())*time.Minute + time.Duration(tm.Second())*time.Second)
	}
	for i, until := range []string{"03:43:21", "04:08:09", "08:07:30", "12:06:50", "12:06:50", "12:06:50", "12:06:50"} {
		it := got.Items[i]
		t.Logf("%-12s hand %s, engine %s", order[i], until, it.ObservableUntil.Format("15:04:05"))
		require.True(t, it.Observable, "%+v", it)
		require.Empty(t, it.NotObservableBecause)
		require.NotNil(t, it.ObservableUntil, "%+v", it)
		require.WithinDuration(t, hand(until), *it.ObservableUntil, 3*time.Minute, "%s: hand %s, engine %s", order[i], until, it.ObservableUntil)
		require.Equal(t, "sets_below_limit", it.UntilReason)
		require.InDelta(t, it.ObservableUntil.Sub(at).Seconds(), *it.ObservableForS, 1e-6)
		require.Nil(t, it.NextObservable)
		require.Nil(t, it.PWVMarginMM, "no PWV limit, or no reading")
	}
	require.Equal(t, []string{"max_pwv_mm"}, got.Items[5].UnknownConstraints, "B wet: no PWV reading on that night")
	lstItem := got.Items[7]
	require.False(t, lstItem.Observable)
	require.Equal(t, []string{"lst_range"}, lstItem.NotObservableBecause)
	require.Nil(t, lstItem.ObservableUntil)
	require.NotNil(t, lstItem.NextObservable)
	t.Logf("A lst        hand 05:54:44, engine %s", lstItem.NextObservable.Format("15:04:05"))
	require.WithinDuration(t, hand("05:54:44"), *lstItem.NextObservable, 30*time.Second, "the LST needs no precession")
	require.Equal(t, "lst_range_start", lstItem.NextReason)
	done, nrth := got.Items[8], got.Items[9]
	require.True(t, done.Observable)
	require.Zero(t, done.RemainingS)
	require.Equal(t, 1800.0, done.ExecutedS)
	require.False(t, nrth.Observable)
	require.Equal(t, []string{"min_elevation_deg"}, nrth.NotObservableBecause)
	require.InDelta(t, 7, nrth.AltDeg, 0.5, "at its highest, 7°")
	require.Nil(t, nrth.ObservableUntil)
	require.Nil(t, nrth.NextObservable, "never above 20°")

	// time accounting: per unit and per program (A: 12.5 h allocated, 0.5 h executed)
	eastA := got.Items[3]
	require.Equal(t, 3600.0, eastA.ExecutedS, "the failed execution does not count")
	require.Equal(t, 3600.0, eastA.RemainingS)
	require.Equal(t, 1.0, eastA.ProgramExecutedHours)
	require.Nil(t, eastA.ProgramAllocatedHours)
	require.Nil(t, eastA.ProgramRemainingHours)
	require.Equal(t, 0.5, got.Items[1].ProgramExecutedHours)
	require.Equal(t, 12.0, *got.Items[1].ProgramRemainingHours)

	// limit answers the first items; total counts all
	r = e.call(t, http.MethodGet, e.gw("/visibility/now?at=2026-03-01T03:00:00Z&limit=2"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var two nowRanking
	r.JSON(t, &two)
	require.Equal(t, 10, two.Total)
	require.Len(t, two.Items, 2)
	require.Equal(t, got.Items[:2], two.Items)

	// bad input: 422 naming the parameter
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/visibility/now?at=yesterday"), e.viewer, nil), http.StatusUnprocessableEntity, "query.at")
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/visibility/now?limit=0"), e.viewer, nil), http.StatusUnprocessableEntity, "query.limit")
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/visibility/now?at=2200-01-01T00:00:00Z"), e.viewer, nil), http.StatusUnprocessableEntity, "query.at")
	requireProblem(t, e.call(t, http.MethodGet, e.gw("/visibility/now?limt=3"), e.viewer, nil), http.StatusUnprocessableEntity, "query.limt")
	// default: now, 50 items at most; with a PWV reading 5 minutes old (0.7 mm), B wet's margin is
	// 1 − 0.7 mm
	_, err := e.db.Exec(`INSERT INTO site_weather (kind, at, pwv_mm, source) VALUES ('measurement', now() - interval '5 minutes', 0.7, 'radiometer')`)
	require.NoError(t, err)
	r = e.call(t, http.MethodGet, e.gw("/visibility/now"), e.viewer, nil)
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	var def nowRanking
	r.JSON(t, &def)
	require.Equal(t, 50, def.Limit)
	require.WithinDuration(t, time.Now(), def.At, time.Minute)
	require.Equal(t, 10, def.Total)
	var wetNow *nowItem
	for i := range def.Items {
		if def.Items[i].ObsUnitName == "wet" {
			wetNow = &def.Items[i]
		}
	}
	require.NotNil(t, wetNow)
	require.NotNil(t, wetNow.PWVMarginMM, "%+v", wetNow)
	require.InDelta(t, 0.3, *wetNow.PWVMarginMM, 1e-9)
}
