package catalog

import (
	"context"
	"time"

	"github.com/obsops/obsops/pkg/weather"
	"github.com/obsops/obsops/services/catalog/visibility"
)

// unitConstraints are an obs unit's constraints as the engine takes them.
func unitConstraints(u *ObsUnit) *visibility.ObsConstraints {
	return &visibility.ObsConstraints{MinElevationDeg: u.MinElevationDeg}
}

// weatherFor is the PWV series the units' PWV limits read at at (nil: none needed or none known).
func (s *Service) weatherFor(ctx context.Context, units []ActiveObsUnit, at time.Time) (*weather.Series, error) {
	return nil, nil
}
