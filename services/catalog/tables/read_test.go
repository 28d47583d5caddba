package tables

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/obsops/obsops/pkg/problem"
	"github.com/obsops/obsops/services/catalog"
)

func locations(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		var fe *problem.FieldError
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if errors.As(e, &fe) {
			out = append(out, fe.Location)
		}
	}
	walk(err)
	return out
}

func TestReadSourcesCSV(t *testing.T) {
	// A spreadsheet in a semicolon locale, with a BOM and a comment line.
	in := "\xef\xbb\xbfName;RA;Dec;otype\n# from my notes\nM 82;09:55:52.43;+69:40:46.9;Galaxy\n"
	rows, err := ReadSources([]byte(in), CSV)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "M 82", rows[0].Spec.Name)
	require.InDelta(t, 15*(9+55/60.0+52.43/3600), *rows[0].Spec.RADeg, 1e-12)
	require.Equal(t, 3, rows[0].Line)

	// Every bad cell of every row at once, each at its row and field.
	_, err = ReadSources([]byte("name,ra,dec,pmra\nA,400,0,\nB,1,1,fast\nC,1,,\n"), CSV)
	require.ElementsMatch(t, []string{"body.rows[1].ra_deg", "body.rows[2].pm_ra_mas_yr", "body.rows[3].dec_deg"}, locations(err))

	_, err = ReadSources([]byte("ra,dec\n1,1\n"), CSV)
	require.Equal(t, []string{"body.columns"}, locations(err))
	_, err = ReadSources([]byte("name,ra,RAJ2000\nA,1,1\n"), CSV)
	require.Equal(t, []string{"body.columns[2]"}, locations(err))
}

func TestWriteReadVOTable(t *testing.T) {
	ra, dec, pm := 83.8221, -5.3911, 1.25
	src := []catalog.Source{{ID: 7, Name: `Orion "KL" <&>`, Kind: "fixed", RADeg: &ra, DecDeg: &dec, PMRAMasYr: &pm, Aliases: []string{"OMC1", "BN/KL"}, CoordOrigin: "user"}}
	var buf bytes.Buffer
	require.NoError(t, WriteVOTable(&buf, Sources("sources", src)))
	rows, err := ReadSources(buf.Bytes(), VOTable)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	s := rows[0].Spec
	require.Equal(t, src[0].Name, s.Name)
	require.Equal(t, ra, *s.RADeg)
	require.Equal(t, pm, *s.PMRAMasYr)
	require.Equal(t, []string{"OMC1", "BN/KL"}, s.Aliases)
	require.Nil(t, s.ParallaxMas, "an empty TD is null")

	// RA in hours when the FIELD says so.
	vot := `<VOTABLE><RESOURCE><TABLE><FIELD name="name" datatype="char" arraysize="*"/><FIELD name="RA" unit="h" datatype="double"/>` +
		`<FIELD name="DEC" unit="deg" datatype="double"/><DATA><TABLEDATA><TR><TD>x</TD><TD>1.5</TD><TD>2</TD></TR></TABLEDATA></DATA></TABLE></RESOURCE></VOTABLE>`
	rows, err = ReadSources([]byte(vot), VOTable)
	require.NoError(t, err)
	require.Equal(t, 22.5, *rows[0].Spec.RADeg)

	_, err = ReadSources([]byte(`<VOTABLE><RESOURCE><TABLE><FIELD name="name" datatype="char"/><DATA><BINARY2/></DATA></TABLE></RESOURCE></VOTABLE>`), VOTable)
	require.Equal(t, []string{"body"}, locations(err))
}

func TestNegotiate(t *testing.T) {
	require.Equal(t, CSV, Negotiate("", "text/csv"))
	require.Equal(t, VOTable, Negotiate("", "application/x-votable+xml;q=0.9, */*"))
	require.Equal(t, JSON, Negotiate("", "application/json, text/csv"))
	require.Equal(t, CSV, Negotiate("csv", "application/json"))
	require.Equal(t, JSON, Negotiate("", ""))
}
