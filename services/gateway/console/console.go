// Package console holds the web console's files: the page (Index) and its hand-written ES
// modules and stylesheet (assets/), embedded into the gateway binary, which serves them at
// /console/ (docs/console.md). No build step: what is here is what the browser runs.
package console

import "embed"

// Assets are the scripts and styles, served under /console/v/<version>/.
//
//go:embed assets
var Assets embed.FS

// Index is the console's one page; {{BASE}} becomes the versioned asset path.
//
//go:embed index.html
var Index string
