// Package cli is the obsops command line (cmd/obsops) and its end-to-end tests.
package cli
