// Package tables writes catalog records as CSV (RFC 4180) and VOTable 1.4, and reads source lists
// back from both, so astronomers move target lists between obsops and their spreadsheets, TOPCAT,
// astropy and Aladin without a script of their own.
//
// A Table is the one in-between shape: named columns with a VOTable datatype, unit and UCD, and
// rows of cells already written as text (empty = null). Builders turn catalog records into a Table
// (sources.go), WriteCSV and WriteVOTable write any Table, and ReadSources parses an uploaded file
// into source specs, naming row and column in every refusal (read.go). Numbers are written with
// the fewest digits that read back to the same float64, so an export imported again is the same
// source to the bit.
package tables

import (
	"mime"
	"strings"
)

// Format is a representation of a read: JSON (the default), CSV or VOTable.
type Format string

// The formats, as the format= query parameter names them.
const (
	JSON    Format = "json"
	CSV     Format = "csv"
	VOTable Format = "votable"
)

// The media types of the table formats (Content-Type of answers and uploads, Accept of requests).
const (
	MediaCSV     = "text/csv"
	MediaVOTable = "application/x-votable+xml"
)

// ContentType is the Content-Type of an answer in f.
func (f Format) ContentType() string {
	switch f {
	case CSV:
		return MediaCSV + "; charset=utf-8; header=present"
	case VOTable:
		return MediaVOTable + "; charset=utf-8"
	}
	return "application/json"
}

// Negotiate picks the format of an answer: format= wins; otherwise the first of text/csv and
// application/x-votable+xml (or text/xml) the Accept header names, as long as it does not also
// name JSON earlier; otherwise JSON. Quality values are not weighed: clients that want a table
// ask for that one type.
func Negotiate(format, accept string) Format {
	switch Format(strings.ToLower(format)) {
	case CSV:
		return CSV
	case VOTable:
		return VOTable
	case JSON:
		return JSON
	}
	for _, part := range strings.Split(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case MediaCSV:
			return CSV
		case MediaVOTable, "text/xml", "application/xml":
			return VOTable
		case "application/json", "application/problem+json":
			return JSON
		}
	}
	return JSON
}

// UploadFormat is the format of an uploaded body from its Content-Type (format= wins), or "" when
// it is neither CSV nor VOTable.
func UploadFormat(format, contentType string) Format {
	switch f := Format(strings.ToLower(format)); f {
	case CSV, VOTable:
		return f
	}
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case MediaCSV, "application/csv", "text/plain":
		return CSV
	case MediaVOTable, "text/xml", "application/xml":
		return VOTable
	}
	return ""
}

// Column is one column of a table, described as VOTable describes a FIELD.
type Column struct {
	Name        string
	Datatype    string // VOTable datatype: double, long, int, boolean or char (then arraysize="*")
	Unit        string // VOTable unit string, e.g. "deg", "mas/yr", "km/s", "h"
	UCD         string // IVOA UCD1+, e.g. "pos.eq.ra;meta.main"
	Description string
}

// Table is a named table of text cells; an empty cell is null.
type Table struct {
	Name        string
	Description string
	Columns     []Column
	Rows        [][]string
}
