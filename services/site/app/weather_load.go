package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/obsops/obsops/pkg/database"
	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/site"
)

// LoadWeather stores the readings of a JSON file shaped as the body of POST /api/site/weather
// ({"items": [...]}) — `site admin load-weather FILE`, how `make up` loads the demo series — with
// the route's checks, in batches of weather.MaxBatch. It returns how many readings were stored.
func LoadWeather(ctx context.Context, cfg *site.Config, path string) (int64, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var body struct {
		Items []weather.Reading `json:"items"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	for i := range body.Items {
		if err := body.Items[i].Validate(fmt.Sprintf("items[%d]", i)); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	db, err := database.Open(cfg.MainDB(), 2) // it writes: at a secondary site, on the main site
	if err != nil {
		return 0, err
	}
	defer db.Close()
	store := &weather.Store{Read: db, Write: db}
	var total int64
	for i := 0; i < len(body.Items); i += weather.MaxBatch {
		n, err := store.Insert(ctx, body.Items[i:min(i+weather.MaxBatch, len(body.Items))])
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}
