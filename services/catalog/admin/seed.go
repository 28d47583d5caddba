package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/postgres"
)

// SeedResult counts what SeedDemo did.
type SeedResult struct {
	SourcesCreated, SourcesKept   int
	ProgramsCreated, ProgramsKept int
}

func f(v float64) *float64 { return &v }
func s(v string) *string   { return &v }

// demoSources are real targets of a submillimetre telescope (ICRS, J2000; SIMBAD positions).
func demoSources() []catalog.SourceSpec {
	ref := s("SIMBAD (demo data)")
	return []catalog.SourceSpec{
		{Name: "Orion KL", Kind: catalog.KindFixed, RADeg: f(83.80900), DecDeg: f(-5.37264), ObjectType: s("hot core / star-forming region"),
			Aliases: []string{"Orion-KL", "Kleinmann-Low Nebula"}, CoordOrigin: "demo", CoordReference: ref},
		{Name: "IRC+10216", Kind: catalog.KindFixed, RADeg: f(146.989192), DecDeg: f(13.278767), PMRAMasYr: f(35), PMDecMasYr: f(12), Epoch: f(2000),
			ObjectType: s("carbon star (AGB)"), Aliases: []string{"CW Leo"}, CoordOrigin: "demo", CoordReference: ref},
		{Name: "Sgr B2(N)", Kind: catalog.KindFixed, RADeg: f(266.832917), DecDeg: f(-28.371389), ObjectType: s("hot core / molecular cloud"),
			Aliases: []string{"Sagittarius B2(N)"}, CoordOrigin: "demo", CoordReference: ref},
		{Name: "E-CDFS", Kind: catalog.KindFixed, RADeg: f(53.116667), DecDeg: f(-27.808333), ObjectType: s("extragalactic deep field"),
			Aliases: []string{"Extended Chandra Deep Field South"}, CoordOrigin: "demo", CoordReference: ref},
		{Name: "Jupiter", Kind: catalog.KindSolarSystem, Body: s("jupiter"), ObjectType: s("planet (calibrator)"), CoordOrigin: "demo"},
		{Name: "DWS-CE45", Kind: catalog.KindConstantElevation, ElevationDeg: f(45), AzMinDeg: f(90), AzMaxDeg: f(150),
			ObjectType: s("constant-elevation survey field"), Aliases: []string{"Deep/Wide Survey CE45"}, CoordOrigin: "demo"},
	}
}

type demoUnit struct {
	name, source string
	module       int
	duration     float64
	minEl        *float64
	priority     int
}

type demoProgram struct {
	spec  catalog.ProgramSpec
	units []demoUnit
}

// demoConstraints are some demo units' observing constraints (decisions §41): the high-frequency
// maps want dry air and a high source, the [CII] survey dry air.
func demoConstraints() map[string]catalog.ObsUnitConstraints {
	f := func(v float64) *float64 { return &v }
	return map[string]catalog.ObsUnitConstraints{
		"orionkl-hfa":   {MaxPWVmm: f(0.8), MaxAirmass: f(2)},
		"ecdfs-eorspec": {MaxPWVmm: f(1.5), MinMoonSeparationDeg: f(20)},
	}
}

func demoPrograms() []demoProgram {
	return []demoProgram{
		{catalog.ProgramSpec{ShortName: "EOR-ECDFS", Title: "EoR-Spec [CII] intensity mapping of E-CDFS", PI: "EoR-Spec team",
			Description: "Line-intensity mapping of [CII] at z 3.5-8 in the E-CDFS field.", Status: "active", AllocatedHours: f(500)},
			[]demoUnit{{"ecdfs-eorspec", "E-CDFS", 14, 7200, f(30), 1}}},
		{catalog.ProgramSpec{ShortName: "CHAI-HOTCORES", Title: "CHAI [CI] and CO mapping of Galactic hot cores", PI: "CHAI team",
			Description: "LFA and HFA maps of Orion KL and Sgr B2(N).", Status: "active", AllocatedHours: f(120)},
			[]demoUnit{{"orionkl-lfa", "Orion KL", 31, 3600, nil, 1}, {"orionkl-hfa", "Orion KL", 32, 3600, f(40), 1}, {"sgrb2n-lfa", "Sgr B2(N)", 31, 5400, nil, 2}}},
		{catalog.ProgramSpec{ShortName: "PCAM-CAL", Title: "Prime-Cam calibration: planets and evolved stars", PI: "Prime-Cam team",
			Status: "active", AllocatedHours: f(50)},
			[]demoUnit{{"jupiter-280", "Jupiter", 11, 600, nil, 0}, {"jupiter-850", "Jupiter", 13, 600, nil, 0}, {"irc10216-350", "IRC+10216", 12, 900, nil, 1}}},
		{catalog.ProgramSpec{ShortName: "PCAM-DWS", Title: "Prime-Cam Deep/Wide survey at constant elevation", PI: "Prime-Cam team",
			Status: "draft", AllocatedHours: f(2000)},
			[]demoUnit{{"ce45-280", "DWS-CE45", 11, 36000, nil, 3}}},
	}
}

// SeedDemo loads the demo sources and programs through the catalog's use cases, as the
// command-line caller "seed-demo". It is idempotent: a source or program whose name exists is
// left as it is.
func SeedDemo(ctx context.Context, store *postgres.Store) (SeedResult, error) {
	var res SeedResult
	svc := &catalog.Service{Store: store}
	by := catalog.Caller{Name: "seed-demo", Admin: true}
	ids := map[string]int64{}
	for _, spec := range demoSources() {
		src, err := svc.CreateSource(ctx, by, spec)
		var conflict *catalog.ConflictError
		switch {
		case err == nil:
			res.SourcesCreated++
			ids[spec.Name] = src.ID
		case errors.As(err, &conflict):
			res.SourcesKept++
		default:
			return res, fmt.Errorf("demo source %s: %w", spec.Name, err)
		}
	}
	var names []string
	for _, spec := range demoSources() {
		if _, ok := ids[spec.Name]; !ok {
			names = append(names, spec.Name)
		}
	}
	if len(names) > 0 {
		found, err := store.LookupNames(ctx, names)
		if err != nil {
			return res, err
		}
		for _, n := range names {
			if a, ok := found[n]; ok && a.SourceID != nil {
				ids[n] = *a.SourceID
			}
		}
	}
	for _, p := range demoPrograms() {
		spec := p.spec
		for _, u := range p.units {
			id, ok := ids[u.source]
			if !ok {
				return res, fmt.Errorf("demo program %s: source %s is missing", spec.ShortName, u.source)
			}
			prio := u.priority
			spec.ObsUnits = append(spec.ObsUnits, catalog.ObsUnitSpec{Name: u.name, SourceID: id, InstrumentModuleID: u.module,
				DurationS: u.duration, MinElevationDeg: u.minEl, Priority: &prio, ObsUnitConstraints: demoConstraints()[u.name]})
		}
		_, err := svc.CreateProgram(ctx, by, spec)
		var conflict *catalog.ConflictError
		switch {
		case err == nil:
			res.ProgramsCreated++
		case errors.As(err, &conflict):
			res.ProgramsKept++
		default:
			return res, fmt.Errorf("demo program %s: %w", spec.ShortName, err)
		}
	}
	return res, nil
}
