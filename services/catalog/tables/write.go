package tables

import (
	"bufio"
	"encoding/csv"
	"encoding/xml"
	"io"
	"strconv"
	"time"
)

// WriteCSV writes t as CSV: a header row of column names, then the rows (RFC 4180 quoting).
func WriteCSV(w io.Writer, t Table) error {
	cw := csv.NewWriter(w)
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	if err := cw.Write(names); err != nil {
		return err
	}
	if err := cw.WriteAll(t.Rows); err != nil {
		return err
	}
	return cw.Error()
}

// votableNamespace is VOTable 1.4's XML namespace: 1.4 kept the 1.3 namespace (IVOA VOTable 1.4,
// section 1), and its schema (VOTable.v1.4.xsd) declares it.
const votableNamespace = "http://www.ivoa.net/xml/VOTable/v1.3"

// WriteVOTable writes t as a VOTable 1.4 document with one RESOURCE and one TABLE serialized as
// TABLEDATA; an empty cell is an empty TD, which VOTable 1.3+ reads as null for every datatype.
func WriteVOTable(w io.Writer, t Table) error {
	bw := bufio.NewWriter(w)
	bw.WriteString(xml.Header)
	bw.WriteString(`<VOTABLE version="1.4" xmlns="` + votableNamespace + `" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">` + "\n")
	bw.WriteString(`<RESOURCE type="results">` + "\n")
	bw.WriteString(`<TABLE name="` + attr(t.Name) + `">` + "\n")
	if t.Description != "" {
		bw.WriteString("<DESCRIPTION>" + text(t.Description) + "</DESCRIPTION>\n")
	}
	for _, c := range t.Columns {
		bw.WriteString(`<FIELD name="` + attr(c.Name) + `" datatype="` + c.Datatype + `"`)
		if c.Datatype == "char" {
			bw.WriteString(` arraysize="*"`)
		}
		if c.Unit != "" {
			bw.WriteString(` unit="` + attr(c.Unit) + `"`)
		}
		if c.UCD != "" {
			bw.WriteString(` ucd="` + attr(c.UCD) + `"`)
		}
		if c.Description == "" {
			bw.WriteString("/>\n")
			continue
		}
		bw.WriteString("><DESCRIPTION>" + text(c.Description) + "</DESCRIPTION></FIELD>\n")
	}
	bw.WriteString("<DATA><TABLEDATA>\n")
	for _, row := range t.Rows {
		bw.WriteString("<TR>")
		for _, cell := range row {
			if cell == "" {
				bw.WriteString("<TD/>")
				continue
			}
			bw.WriteString("<TD>" + text(cell) + "</TD>")
		}
		bw.WriteString("</TR>\n")
	}
	bw.WriteString("</TABLEDATA></DATA>\n</TABLE>\n</RESOURCE>\n</VOTABLE>\n")
	return bw.Flush()
}

func text(s string) string {
	var b xmlBuffer
	_ = xml.EscapeText(&b, []byte(s))
	return string(b)
}

func attr(s string) string { return text(s) } // EscapeText also escapes the quotes

type xmlBuffer []byte

func (b *xmlBuffer) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// Float writes v with the fewest digits that read back to v; nil is the empty (null) cell.
func Float(v *float64) string {
	if v == nil {
		return ""
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}

// Int writes v; nil is null.
func Int(v *int) string {
	if v == nil {
		return ""
	}
	return strconv.Itoa(*v)
}

// Str writes v; nil is null.
func Str(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

// Time writes t in RFC 3339 with the fraction it has (UTC), as the JSON answers do.
func Time(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
