package tables

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
	"github.com/obsops/obsops/services/catalog/resolve"
)

// MaxImportRows is the most sources one import may create: a large survey's target list, and
// still one transaction of a few hundred milliseconds (docs/benchmarks.md, "Source import").
const MaxImportRows = 10000

// columnNames maps the column names an import understands (lower case) to the source field they
// fill. The canonical names are those of an export (sourceColumns); the others are what
// spreadsheets, SIMBAD, VizieR and astropy tables commonly call the same thing.
var columnNames = map[string]string{
	"name": "name", "source": "name", "source_name": "name", "target": "name", "main_id": "name",
	"kind":   "kind",
	"ra_deg": "ra_deg", "ra": "ra_deg", "raj2000": "ra_deg", "_raj2000": "ra_deg", "ra_icrs": "ra_deg",
	"dec_deg": "dec_deg", "dec": "dec_deg", "de": "dec_deg", "dej2000": "dec_deg", "_dej2000": "dec_deg", "decj2000": "dec_deg",
	"dec_icrs": "dec_deg", "de_icrs": "dec_deg",
	"epoch":        "epoch",
	"pm_ra_mas_yr": "pm_ra_mas_yr", "pmra": "pm_ra_mas_yr", "pm_ra": "pm_ra_mas_yr",
	"pm_dec_mas_yr": "pm_dec_mas_yr", "pmdec": "pm_dec_mas_yr", "pmde": "pm_dec_mas_yr", "pm_dec": "pm_dec_mas_yr",
	"parallax_mas": "parallax_mas", "parallax": "parallax_mas", "plx": "parallax_mas", "plx_value": "parallax_mas",
	"radial_velocity_kms": "radial_velocity_kms", "radial_velocity": "radial_velocity_kms", "rv": "radial_velocity_kms", "rv_value": "radial_velocity_kms",
	"body":          "body",
	"elevation_deg": "elevation_deg", "az_min_deg": "az_min_deg", "az_max_deg": "az_max_deg",
	"object_type": "object_type", "otype": "object_type", "type": "object_type",
	"aliases":      "aliases",
	"coord_origin": "coord_origin", "coord_reference": "coord_reference",
	// What an export adds and an import leaves to the database.
	"id": "", "created_at": "", "updated_at": "", "distance_deg": "",
}

// coordOrigins are the provenances a file may give (the sources table's CHECK); default user.
var coordOrigins = map[string]bool{"user": true, "local_catalog": true, "database": true, "sesame": true, "demo": true}

// ReadSources parses an uploaded CSV or VOTable into source specs, each normalised by the same
// rules as POST /sources/ (catalog.SourceSpec.Normalize). Every refusal is a problem.FieldError at
// body.rows[N].FIELD (N counts data rows from 1) or body.columns[N], and all of them are returned
// joined, so a file is fixed in one round. The rules of the columns:
//   - name is required; kind defaults to fixed (solar_system when body is given, constant_elevation
//     when elevation_deg is);
//   - ra and dec are degrees, or sexagesimal hours and degrees ("05:35:14.5", "05h35m14.5s",
//     "-05:22:30", "-05d22m30s"); a VOTable FIELD of ra with unit "h" or "hourangle" is in hours;
//   - aliases are separated by ';'; empty cells are null; unknown columns are refused (listing
//     the known ones) so that no column of a target list is silently dropped.
func ReadSources(data []byte, f Format) ([]catalog.ImportRow, error) {
	var (
		t   rawTable
		err error
	)
	switch f {
	case CSV:
		t, err = readCSV(data)
	case VOTable:
		t, err = readVOTable(data)
	default:
		return nil, problem.Field("header.Content-Type", "must be text/csv or application/x-votable+xml (or give format=csv|votable)", nil)
	}
	if err != nil {
		return nil, err
	}
	if len(t.rows) == 0 {
		return nil, problem.Field("body", "the file has no rows", nil)
	}
	if len(t.rows) > MaxImportRows {
		return nil, problem.Field("body", fmt.Sprintf("at most %d rows per import; this file has %d", MaxImportRows, len(t.rows)), nil)
	}
	fields, err := mapColumns(t.columns)
	if err != nil {
		return nil, err
	}
	out := make([]catalog.ImportRow, 0, len(t.rows))
	var errs []error
	for i, cells := range t.rows {
		spec, err := readRow(fields, t.raHours, cells)
		if err != nil {
			errs = append(errs, relocate(err, i+1, t.lines[i]))
			if len(errs) >= problem.MaxErrors {
				break
			}
			continue
		}
		out = append(out, catalog.ImportRow{Spec: spec, Line: t.lines[i]})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// rawTable is a parsed file before its cells are read: column names, rows of cells, the line each
// row starts on, and whether the ra column is in hours (VOTable unit).
type rawTable struct {
	columns []string
	rows    [][]string
	lines   []int
	raHours bool
}

// mapColumns gives each column the field it fills ("" = ignored), refusing unknown and repeated ones.
func mapColumns(columns []string) ([]string, error) {
	fields := make([]string, len(columns))
	seen := map[string]int{}
	var errs []error
	for i, c := range columns {
		name := strings.ToLower(strings.TrimSpace(c))
		field, ok := columnNames[name]
		loc := fmt.Sprintf("body.columns[%d]", i)
		switch {
		case !ok:
			errs = append(errs, problem.Field(loc, fmt.Sprintf("unknown column %q; the columns are those of an export: %s", c, knownColumns()), c))
		case field == "":
		default:
			if j, dup := seen[field]; dup {
				errs = append(errs, problem.Field(loc, fmt.Sprintf("column %q gives %s, as column %q does", c, field, columns[j]), c))
			}
			seen[field] = i
		}
		fields[i] = field
	}
	if _, ok := seen["name"]; !ok && len(errs) == 0 {
		errs = append(errs, problem.Field("body.columns", "a name column is required", nil))
	}
	return fields, errors.Join(errs...)
}

func knownColumns() string {
	names := make([]string, 0, len(sourceColumns))
	for _, c := range sourceColumns {
		names = append(names, c.Name)
	}
	return strings.Join(names, ", ")
}

// readRow reads one row's cells into a normalised spec.
func readRow(fields []string, raHours bool, cells []string) (catalog.SourceSpec, error) {
	var spec catalog.SourceSpec
	val := map[string]string{}
	for i, f := range fields {
		if f != "" && i < len(cells) {
			if v := strings.TrimSpace(cells[i]); v != "" {
				val[f] = v
			}
		}
	}
	spec.Name = val["name"]
	spec.Kind = val["kind"]
	if spec.Kind == "" {
		switch {
		case val["body"] != "":
			spec.Kind = catalog.KindSolarSystem
		case val["elevation_deg"] != "":
			spec.Kind = catalog.KindConstantElevation
		default:
			spec.Kind = catalog.KindFixed
		}
	}
	var errs []error
	num := func(field string) *float64 {
		s, ok := val[field]
		if !ok {
			return nil
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, problem.Field("body."+field, "must be a finite number", s))
			return nil
		}
		return &v
	}
	spec.RADeg, spec.DecDeg = readPosition(val["ra_deg"], val["dec_deg"], raHours, &errs)
	spec.Epoch = num("epoch")
	spec.PMRAMasYr, spec.PMDecMasYr = num("pm_ra_mas_yr"), num("pm_dec_mas_yr")
	spec.ParallaxMas, spec.RadialVelocity = num("parallax_mas"), num("radial_velocity_kms")
	spec.ElevationDeg, spec.AzMinDeg, spec.AzMaxDeg = num("elevation_deg"), num("az_min_deg"), num("az_max_deg")
	if b, ok := val["body"]; ok {
		b = strings.ToLower(b)
		spec.Body = &b
	}
	if t, ok := val["object_type"]; ok {
		spec.ObjectType = &t
	}
	if r, ok := val["coord_reference"]; ok {
		spec.CoordReference = &r
	}
	if o, ok := val["coord_origin"]; ok {
		if !coordOrigins[o] {
			errs = append(errs, problem.Field("body.coord_origin", "must be user, local_catalog, database, sesame or demo", o))
		}
		spec.CoordOrigin = o
	}
	if a, ok := val["aliases"]; ok {
		for _, alias := range strings.Split(a, AliasSeparator) {
			if alias = strings.TrimSpace(alias); alias != "" {
				spec.Aliases = append(spec.Aliases, alias)
			}
		}
		if len(spec.Aliases) > catalog.MaxAliases {
			errs = append(errs, problem.Field("body.aliases", fmt.Sprintf("at most %d aliases", catalog.MaxAliases), len(spec.Aliases)))
		}
	}
	if len(errs) > 0 {
		return spec, errors.Join(errs...)
	}
	return spec, spec.Normalize()
}

// readPosition reads ra and dec: two decimal numbers are degrees (ra in hours when the column
// says so); anything else must be a sexagesimal pair (resolve.ParseCoordinates, the rule of
// coordinate strings everywhere in the catalog).
func readPosition(ra, dec string, raHours bool, errs *[]error) (*float64, *float64) {
	if ra == "" && dec == "" {
		return nil, nil
	}
	if ra == "" || dec == "" {
		missing := "body.ra_deg"
		if dec == "" {
			missing = "body.dec_deg"
		}
		*errs = append(*errs, problem.Field(missing, "ra and dec come together", nil))
		return nil, nil
	}
	r, errR := strconv.ParseFloat(ra, 64)
	d, errD := strconv.ParseFloat(dec, 64)
	if errR == nil && errD == nil {
		if raHours {
			r *= 15
		}
		return &r, &d
	}
	r, d, ok, err := resolve.ParseCoordinates(ra + " " + dec)
	switch {
	case !ok:
		loc, v := "body.ra_deg", ra
		if errR == nil {
			loc, v = "body.dec_deg", dec
		}
		*errs = append(*errs, problem.Field(loc, "must be degrees or sexagesimal (ra 05:35:14.5 or 05h35m14.5s, dec -05:22:30 or -05d22m30s)", v))
		return nil, nil
	case err != nil:
		*errs = append(*errs, problem.Field("body.ra_deg", err.Error(), ra+" "+dec))
		return nil, nil
	}
	return &r, &d
}

// relocate puts a row's field errors at body.rows[n].FIELD, their messages starting with the line.
func relocate(err error, n, line int) error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		var fe *problem.FieldError
		switch {
		case errors.As(e, &fe) && !isJoin(e):
			field := strings.TrimPrefix(fe.Location, "body.")
			out = append(out, problem.Field(fmt.Sprintf("body.rows[%d].%s", n, field), fmt.Sprintf("line %d: %s", line, fe.Message), fe.Value))
		case isJoin(e):
			for _, x := range e.(interface{ Unwrap() []error }).Unwrap() {
				walk(x)
			}
		default:
			out = append(out, e)
		}
	}
	walk(err)
	return errors.Join(out...)
}

func isJoin(e error) bool { _, ok := e.(interface{ Unwrap() []error }); return ok }

// readCSV parses CSV (comma-separated, or semicolon-separated when the header has semicolons and
// no commas, as spreadsheets in many locales write it; a UTF-8 byte-order mark and lines starting
// with # are skipped).
func readCSV(data []byte) (rawTable, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	r := csv.NewReader(bytes.NewReader(data))
	r.Comment = '#'
	r.ReuseRecord = false
	if header, _, _ := bytes.Cut(data, []byte("\n")); !bytes.ContainsRune(header, ',') && bytes.ContainsRune(header, ';') {
		r.Comma = ';'
	}
	var t rawTable
	header, err := r.Read()
	if err != nil {
		return t, csvError(err)
	}
	t.columns = header
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return t, csvError(err)
		}
		line, _ := r.FieldPos(0)
		t.rows = append(t.rows, rec)
		t.lines = append(t.lines, line)
		if len(t.rows) > MaxImportRows {
			return t, nil // ReadSources refuses it, without reading the rest
		}
	}
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return problem.Field("body", fmt.Sprintf("line %d: %v", pe.Line, pe.Err), nil)
	}
	if errors.Is(err, io.EOF) {
		return problem.Field("body", "the file is empty: a header row naming the columns is required", nil)
	}
	return problem.Field("body", "not CSV: "+err.Error(), nil)
}

// readVOTable reads the first TABLE of a VOTable (any version; TABLEDATA serialization) by
// streaming its tokens, so memory stays at the rows themselves.
func readVOTable(data []byte) (rawTable, error) {
	var t rawTable
	dec := xml.NewDecoder(bytes.NewReader(data))
	dec.Strict = true
	var (
		inTable, inTD, sawTable bool
		row                     []string
		cell                    strings.Builder
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			line, _ := dec.InputPos()
			return t, problem.Field("body", fmt.Sprintf("not a VOTable: line %d: %v", line, err), nil)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "TABLE":
				if sawTable {
					return t, nil // the first table only
				}
				inTable, sawTable = true, true
			case "FIELD":
				if !inTable {
					continue
				}
				name, unit := attrOf(el, "name"), attrOf(el, "unit")
				if name == "" {
					name = attrOf(el, "ID")
				}
				t.columns = append(t.columns, name)
				if columnNames[strings.ToLower(name)] == "ra_deg" {
					u := strings.ToLower(unit)
					t.raHours = u == "h" || u == "hour" || u == "hourangle"
				}
			case "BINARY", "BINARY2", "FITS":
				return t, problem.Field("body", "only the TABLEDATA serialization is read; write the VOTable with TABLEDATA (astropy: "+
					"tabledata_format=\"tabledata\"; TOPCAT: votable-tabledata)", el.Name.Local)
			case "TR":
				row = make([]string, 0, len(t.columns))
				line, _ := dec.InputPos()
				t.lines = append(t.lines, line)
			case "TD":
				inTD = true
				cell.Reset()
			}
		case xml.CharData:
			if inTD {
				cell.Write(el)
			}
		case xml.EndElement:
			switch el.Name.Local {
			case "TD":
				inTD = false
				row = append(row, cell.String())
			case "TR":
				t.rows = append(t.rows, row)
				if len(t.rows) > MaxImportRows {
					return t, nil
				}
			case "TABLE":
				inTable = false
			}
		}
	}
	if !sawTable {
		return t, problem.Field("body", "not a VOTable: no TABLE element", nil)
	}
	return t, nil
}

func attrOf(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}
