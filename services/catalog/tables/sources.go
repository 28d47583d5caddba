package tables

import (
	"strconv"
	"strings"
	"time"

	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// AliasSeparator joins a source's aliases in one cell (CSV and VOTable alike); names with it in
// them cannot be exported or imported as aliases, which no catalogue designation does.
const AliasSeparator = ";"

// sourceColumns are the columns of a source, in the order of the JSON answer. Import reads the
// same names (read.go), so an export is an import file as it is.
var sourceColumns = []Column{
	{Name: "id", Datatype: "long", UCD: "meta.record", Description: "obsops source id (ignored on import)"},
	{Name: "name", Datatype: "char", UCD: "meta.id;meta.main"},
	{Name: "kind", Datatype: "char", UCD: "meta.code.class", Description: "fixed, solar_system or constant_elevation"},
	{Name: "ra_deg", Datatype: "double", Unit: "deg", UCD: "pos.eq.ra;meta.main", Description: "ICRS right ascension"},
	{Name: "dec_deg", Datatype: "double", Unit: "deg", UCD: "pos.eq.dec;meta.main", Description: "ICRS declination"},
	{Name: "epoch", Datatype: "double", Unit: "yr", UCD: "time.epoch", Description: "Julian epoch of ra_deg/dec_deg"},
	{Name: "pm_ra_mas_yr", Datatype: "double", Unit: "mas/yr", UCD: "pos.pm;pos.eq.ra", Description: "proper motion mu_alpha* (includes cos dec)"},
	{Name: "pm_dec_mas_yr", Datatype: "double", Unit: "mas/yr", UCD: "pos.pm;pos.eq.dec"},
	{Name: "parallax_mas", Datatype: "double", Unit: "mas", UCD: "pos.parallax"},
	{Name: "radial_velocity_kms", Datatype: "double", Unit: "km/s", UCD: "spect.dopplerVeloc"},
	{Name: "body", Datatype: "char", UCD: "meta.id", Description: "solar-system body (solar_system sources)"},
	{Name: "elevation_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.alt", Description: "fixed elevation (constant_elevation sources)"},
	{Name: "az_min_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.azi"},
	{Name: "az_max_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.azi"},
	{Name: "object_type", Datatype: "char", UCD: "src.class"},
	{Name: "aliases", Datatype: "char", UCD: "meta.id", Description: "other names, separated by ';'"},
	{Name: "coord_origin", Datatype: "char", UCD: "meta.ref", Description: "where the coordinates came from"},
	{Name: "coord_reference", Datatype: "char", UCD: "meta.ref"},
	{Name: "created_at", Datatype: "char", UCD: "time.creation", Description: "UTC, RFC 3339 (ignored on import)"},
	{Name: "updated_at", Datatype: "char", UCD: "time.processing", Description: "UTC, RFC 3339 (ignored on import)"},
}

// sourceCells are a source's cells in sourceColumns' order.
func sourceCells(s catalog.Source) []string {
	return []string{strconv.FormatInt(s.ID, 10), s.Name, s.Kind, Float(s.RADeg), Float(s.DecDeg), Float(s.Epoch),
		Float(s.PMRAMasYr), Float(s.PMDecMasYr), Float(s.ParallaxMas), Float(s.RadialVelocity), Str(s.Body),
		Float(s.ElevationDeg), Float(s.AzMinDeg), Float(s.AzMaxDeg), Str(s.ObjectType),
		strings.Join(s.Aliases, AliasSeparator), s.CoordOrigin, Str(s.CoordReference), Time(s.CreatedAt), Time(s.UpdatedAt)}
}

// Sources is a list of sources as a table; a cone search's answer adds distance_deg.
func Sources(name string, sources []catalog.Source) Table {
	t := Table{Name: name, Description: "obsops sources", Columns: sourceColumns, Rows: make([][]string, len(sources))}
	cone := len(sources) > 0 && sources[0].DistanceDeg != nil
	if cone {
		t.Columns = append(append([]Column{}, sourceColumns...),
			Column{Name: "distance_deg", Datatype: "double", Unit: "deg", UCD: "pos.angDistance", Description: "distance from the cone's centre (ignored on import)"})
	}
	for i, s := range sources {
		t.Rows[i] = sourceCells(s)
		if cone {
			t.Rows[i] = append(t.Rows[i], Float(s.DistanceDeg))
		}
	}
	return t
}

// Program is a program's obs units, one row each, with the columns of its source: the table an
// astronomer takes to a planning tool. Sources holds the program's sources by id.
func Program(p catalog.Program, sources map[int64]catalog.Source) Table {
	unit := []Column{
		{Name: "program_id", Datatype: "long", UCD: "meta.id"},
		{Name: "program", Datatype: "char", UCD: "meta.id", Description: "the program's short name"},
		{Name: "obs_unit_id", Datatype: "long", UCD: "meta.id"},
		{Name: "obs_unit", Datatype: "char", UCD: "meta.id", Description: "the obs unit's name"},
		{Name: "instrument_module_id", Datatype: "int", UCD: "meta.id;instr"},
		{Name: "duration_s", Datatype: "double", Unit: "s", UCD: "time.duration;obs.exposure"},
		{Name: "min_elevation_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.alt;stat.min"},
		{Name: "priority", Datatype: "int", UCD: "meta.number", Description: "lower values first"},
		{Name: "max_airmass", Datatype: "double", UCD: "obs.airMass;stat.max"},
		{Name: "min_moon_separation_deg", Datatype: "double", Unit: "deg", UCD: "pos.angDistance;stat.min", Description: "angle to the Moon at least"},
		{Name: "min_sun_separation_deg", Datatype: "double", Unit: "deg", UCD: "pos.angDistance;stat.min", Description: "angle to the Sun at least (instead of the site's)"},
		{Name: "max_pwv_mm", Datatype: "double", Unit: "mm", Description: "precipitable water vapour at most"},
		{Name: "lst_start_hours", Datatype: "double", Unit: "h", UCD: "time.start", Description: "LST range start"},
		{Name: "lst_end_hours", Datatype: "double", Unit: "h", UCD: "time.end", Description: "LST range end (before start: across midnight)"},
		{Name: "time_windows", Datatype: "char", UCD: "time.interval", Description: "UTC windows, ISO 8601 start/end, separated by spaces"},
		{Name: "source_id", Datatype: "long", UCD: "meta.id"},
	}
	t := Table{Name: p.ShortName, Description: p.Title, Columns: append(unit, sourceColumns[1:len(sourceColumns)-2]...)}
	for _, u := range p.ObsUnits {
		row := []string{strconv.FormatInt(p.ID, 10), p.ShortName, strconv.FormatInt(u.ID, 10), u.Name,
			strconv.Itoa(u.InstrumentModuleID), Float(&u.DurationS), Float(u.MinElevationDeg), Int(u.Priority),
			Float(u.MaxAirmass), Float(u.MinMoonSeparationDeg), Float(u.MinSunSeparationDeg), Float(u.MaxPWVmm), "", "", "",
			strconv.FormatInt(u.SourceID, 10)}
		if r := u.LSTRange; r != nil {
			row[12], row[13] = Float(&r.StartHours), Float(&r.EndHours)
		}
		ws := make([]string, len(u.TimeWindows))
		for i, w := range u.TimeWindows {
			ws[i] = w.Start.Format(time.RFC3339Nano) + "/" + w.End.Format(time.RFC3339Nano)
		}
		row[14] = strings.Join(ws, " ")
		src, ok := sources[u.SourceID]
		if !ok {
			src = catalog.Source{Name: u.SourceName}
		}
		cells := sourceCells(src)
		t.Rows = append(t.Rows, append(row, cells[1:len(cells)-2]...))
	}
	return t
}

// Samples is a visibility answer's samples, one row per time.
func Samples(name string, samples []visibility.Sample) Table {
	t := Table{Name: name, Description: "altitude, azimuth, airmass and Sun separation from the site", Columns: []Column{
		{Name: "time_utc", Datatype: "char", UCD: "time.epoch", Description: "UTC, RFC 3339"},
		{Name: "alt_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.alt"},
		{Name: "az_deg", Datatype: "double", Unit: "deg", UCD: "pos.az.azi", Description: "from north through east"},
		{Name: "airmass", Datatype: "double", UCD: "obs.airMass", Description: "sec z; null below the horizon"},
		{Name: "sun_sep_deg", Datatype: "double", Unit: "deg", UCD: "pos.angDistance"},
		{Name: "observable", Datatype: "boolean", UCD: "meta.code"},
	}, Rows: make([][]string, len(samples))}
	for i, s := range samples {
		t.Rows[i] = []string{Time(s.Time), Float(&s.AltDeg), Float(&s.AzDeg), Float(s.Airmass), Float(&s.SunSepDeg), strconv.FormatBool(s.Observable)}
	}
	return t
}

// HeatmapSource is one row label of a heatmap.
type HeatmapSource struct {
	ID   int64
	Name string
}

// Heatmap is a heatmap in long form: one row per source and day with its hours observable.
func Heatmap(name string, sources []HeatmapSource, days []string, hours [][]float64) Table {
	t := Table{Name: name, Description: "hours observable per source per UTC day", Columns: []Column{
		{Name: "source_id", Datatype: "long", UCD: "meta.id"},
		{Name: "source_name", Datatype: "char", UCD: "meta.id;meta.main"},
		{Name: "date", Datatype: "char", UCD: "time.epoch", Description: "UTC day, YYYY-MM-DD"},
		{Name: "hours_observable", Datatype: "double", Unit: "h", UCD: "time.duration"},
	}}
	t.Rows = make([][]string, 0, len(sources)*len(days))
	for i, s := range sources {
		id := strconv.FormatInt(s.ID, 10)
		for d, day := range days {
			t.Rows = append(t.Rows, []string{id, s.Name, day, strconv.FormatFloat(hours[i][d], 'f', 2, 64)})
		}
	}
	return t
}
