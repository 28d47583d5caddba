package resolve

import (
	"context"
	"strings"
	"sync"
)

// Resolver names in answers.
const (
	ByCoordinates  = "coordinates"   // the input was a position
	ByLocalCatalog = "local_catalog" // the catalogue shipped in the binary
	ByDatabase     = "database"      // a source or alias in the database
	BySesame       = "sesame"        // CDS Sesame (online)
)

// Answer is the resolution of one input name.
type Answer struct {
	Input      string   `json:"input"`
	Found      bool     `json:"found"`
	Name       string   `json:"name,omitempty" doc:"Canonical name."`
	RADeg      *float64 `json:"ra_deg,omitempty" doc:"ICRS right ascension (J2000)."`
	DecDeg     *float64 `json:"dec_deg,omitempty" doc:"ICRS declination (J2000)."`
	ObjectType string   `json:"object_type,omitempty"`
	Aliases    []string `json:"aliases"`
	Resolver   string   `json:"resolver,omitempty" enum:"coordinates,local_catalog,database,sesame" doc:"Which resolver answered."`
	Reference  string   `json:"reference,omitempty" doc:"The catalogue entry or resolver database behind the answer."`
	// SourceID, Kind: a database answer names the stored source (which may be a solar-system or
	// constant-elevation source without coordinates).
	SourceID *int64 `json:"source_id,omitempty"`
	Kind     string `json:"kind,omitempty"`
	// PMRAMasYr, PMDecMasYr, Epoch: the proper motion and the epoch of the position, when the
	// catalogue entry gives them (a source created with "resolve": true takes them).
	PMRAMasYr  *float64 `json:"pm_ra_mas_yr,omitempty" doc:"Proper motion in RA, mu_alpha* (includes cos dec), mas/yr."`
	PMDecMasYr *float64 `json:"pm_dec_mas_yr,omitempty" doc:"Proper motion in Dec, mas/yr."`
	Epoch      *float64 `json:"epoch,omitempty" doc:"Julian epoch of the position (with a proper motion)."`
	// Asked lists the resolvers asked for this name, in order, so that "not found" says where
	// the name was looked for.
	Asked []string `json:"resolvers_asked" doc:"Resolvers asked for this name, in order: coordinates, local_catalog, database, sesame."`
	// Error says why a name could not be looked up everywhere (e.g. Sesame timed out), or why
	// a coordinate string is invalid.
	Error string `json:"error,omitempty"`
}

func found(input, resolver string, o Object) Answer {
	ra, dec := o.RADeg, o.DecDeg
	aliases := o.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return Answer{Input: input, Found: true, Name: o.Name, RADeg: &ra, DecDeg: &dec, ObjectType: o.ObjectType,
		Aliases: aliases, Resolver: resolver, Reference: o.Reference, PMRAMasYr: o.PMRAMasYr, PMDecMasYr: o.PMDecMasYr,
		Epoch: o.Epoch}
}

// Online resolution states in answers.
const (
	OnlineEnabled  = "enabled"  // OPS_SESAME_URL is set: names found nowhere else are asked online
	OnlineDisabled = "disabled" // not configured: "not found" means not found offline nor in the database
)

// OnlineState says whether the online resolver is configured.
func (r *Resolver) OnlineState() string {
	if r.Online == nil {
		return OnlineDisabled
	}
	return OnlineEnabled
}

// Lookup finds names among the database's sources and aliases: one query for a batch, the
// answers keyed by input (only found names).
type Lookup interface {
	LookupNames(ctx context.Context, names []string) (map[string]Answer, error)
}

// Online is an online resolver (Sesame): one name per call.
type Online interface {
	Resolve(ctx context.Context, name string) (Answer, error)
}

// Resolver resolves names in order: coordinates and the local catalogue, the database, and the
// online resolver if there is one.
type Resolver struct {
	Local  *Local
	DB     Lookup // nil: skipped
	Online Online // nil: skipped (OPS_SESAME_URL unset)
	// OnlineParallel bounds concurrent online lookups of one batch (default 8).
	OnlineParallel int
}

// Resolve answers every input, in input order. A database failure is an error; an online
// resolver failure only marks the names it could not answer (found false, error set).
func (r *Resolver) Resolve(ctx context.Context, inputs []string) ([]Answer, error) {
	out := make([]Answer, len(inputs))
	var pending []int
	for i, in := range inputs {
		out[i] = Answer{Input: in, Aliases: []string{}, Asked: []string{ByCoordinates}}
		name := strings.TrimSpace(in)
		if ra, dec, ok, err := ParseCoordinates(name); ok {
			if err != nil {
				out[i].Error = err.Error()
				continue
			}
			out[i] = Answer{Input: in, Found: true, Name: FormatRA(ra) + " " + FormatDec(dec), RADeg: &ra, DecDeg: &dec,
				Aliases: []string{}, Resolver: ByCoordinates, Asked: []string{ByCoordinates}}
			continue
		}
		if o, ok := r.Local.Lookup(name); ok {
			out[i] = found(in, ByLocalCatalog, o)
			out[i].Asked = []string{ByCoordinates, ByLocalCatalog}
			continue
		}
		out[i].Asked = append(out[i].Asked, ByLocalCatalog)
		pending = append(pending, i)
	}
	if len(pending) > 0 && r.DB != nil {
		names := make([]string, len(pending))
		for j, i := range pending {
			names[j] = strings.TrimSpace(inputs[i])
		}
		hits, err := r.DB.LookupNames(ctx, names)
		if err != nil {
			return nil, err
		}
		rest := pending[:0]
		for _, i := range pending {
			out[i].Asked = append(out[i].Asked, ByDatabase)
			if a, ok := hits[strings.TrimSpace(inputs[i])]; ok {
				a.Input = inputs[i]
				a.Asked = out[i].Asked
				out[i] = a
				continue
			}
			rest = append(rest, i)
		}
		pending = rest
	}
	if len(pending) > 0 && r.Online != nil {
		par := r.OnlineParallel
		if par <= 0 {
			par = 8
		}
		sem := make(chan struct{}, par)
		var wg sync.WaitGroup
		for _, i := range pending {
			name := strings.TrimSpace(inputs[i])
			if name == "" {
				continue
			}
			out[i].Asked = append(out[i].Asked, BySesame)
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				a, err := r.Online.Resolve(ctx, name)
				if err != nil {
					out[i].Error = "online resolver unavailable: " + err.Error()
					return
				}
				a.Input = inputs[i]
				a.Asked = out[i].Asked
				if a.Aliases == nil {
					a.Aliases = []string{}
				}
				out[i] = a
			}()
		}
		wg.Wait()
	}
	return out, nil
}
