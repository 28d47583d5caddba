package resolve

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Sesame resolves names with CDS Sesame (https://cds.unistra.fr/cgi-bin/nph-sesame), asking
// SIMBAD, then NED, then VizieR (SNV), and caches every answer in Redis: found names for
// CacheTTL, unknown names for NegativeTTL. Failures (timeouts, errors) are not cached.
type Sesame struct {
	BaseURL     string        // OPS_SESAME_URL, e.g. https://cds.unistra.fr/cgi-bin/nph-sesame
	Timeout     time.Duration // per lookup (OPS_SESAME_TIMEOUT)
	CacheTTL    time.Duration // OPS_SESAME_CACHE_TTL
	NegativeTTL time.Duration // default 10m
	HTTP        *http.Client
	Redis       redis.UniversalClient // nil: no cache
	Log         *slog.Logger
	lookups     *prometheus.CounterVec
}

// NewSesame returns a Sesame client; metrics (lookups by outcome) go to reg when it is non-nil.
func NewSesame(baseURL string, timeout, cacheTTL time.Duration, rdb redis.UniversalClient, log *slog.Logger, reg prometheus.Registerer) *Sesame {
	s := &Sesame{
		BaseURL: strings.TrimRight(baseURL, "/"), Timeout: timeout, CacheTTL: cacheTTL, NegativeTTL: 10 * time.Minute,
		HTTP: &http.Client{Timeout: timeout}, Redis: rdb, Log: log,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "obsops_catalog_sesame_lookups_total",
			Help: "Online name lookups by outcome: cache_hit, found, not_found, error.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(s.lookups)
	}
	return s
}

const sesameCachePrefix = "ops:catalog:sesame:v1:"

// Resolve answers one name from the cache or from Sesame.
func (s *Sesame) Resolve(ctx context.Context, name string) (Answer, error) {
	key := sesameCachePrefix + strings.ToLower(strings.Join(strings.Fields(name), " "))
	if s.Redis != nil {
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		b, err := s.Redis.Get(cctx, key).Bytes()
		cancel()
		if err == nil {
			var a Answer
			if json.Unmarshal(b, &a) == nil {
				s.lookups.WithLabelValues("cache_hit").Inc()
				return a, nil
			}
		} else if !errors.Is(err, redis.Nil) && s.Log != nil {
			s.Log.Warn("sesame cache unavailable", "error", err)
		}
	}
	a, err := s.fetch(ctx, name)
	if err != nil {
		s.lookups.WithLabelValues("error").Inc()
		if s.Log != nil {
			s.Log.Warn("sesame lookup failed", "name", name, "error", err)
		}
		return Answer{}, err
	}
	ttl := s.CacheTTL
	if a.Found {
		s.lookups.WithLabelValues("found").Inc()
	} else {
		s.lookups.WithLabelValues("not_found").Inc()
		ttl = s.NegativeTTL
	}
	if s.Redis != nil && ttl > 0 {
		if b, err := json.Marshal(a); err == nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 200*time.Millisecond)
			_ = s.Redis.Set(cctx, key, b, ttl).Err()
			cancel()
		}
	}
	return a, nil
}

// sesameXML is the part of Sesame's XML answer (-oxI) that is used.
type sesameXML struct {
	Targets []struct {
		Resolvers []struct {
			Name    string   `xml:"name,attr"`
			OType   string   `xml:"otype"`
			RA      string   `xml:"jradeg"`
			Dec     string   `xml:"jdedeg"`
			RefPos  string   `xml:"refPos"`
			OName   string   `xml:"oname"`
			Aliases []string `xml:"alias"`
		} `xml:"Resolver"`
	} `xml:"Target"`
}

func (s *Sesame) fetch(ctx context.Context, name string) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	u := s.BaseURL + "/-oxI/SNV?" + strings.ReplaceAll(url.QueryEscape(name), "+", "%20")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Answer{}, err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Answer{}, fmt.Errorf("no answer within %s", s.Timeout)
		}
		return Answer{}, errors.New("unreachable")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Answer{}, fmt.Errorf("HTTP status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Answer{}, fmt.Errorf("reading the answer: %w", err)
	}
	var doc sesameXML
	if err := xml.Unmarshal(body, &doc); err != nil {
		return Answer{}, fmt.Errorf("unreadable answer: %w", err)
	}
	a := Answer{Input: name, Aliases: []string{}}
	for _, t := range doc.Targets {
		for _, r := range t.Resolvers {
			ra, err1 := strconv.ParseFloat(strings.TrimSpace(r.RA), 64)
			dec, err2 := strconv.ParseFloat(strings.TrimSpace(r.Dec), 64)
			if err1 != nil || err2 != nil || checkRange(ra, dec) != nil {
				continue
			}
			a.Found, a.RADeg, a.DecDeg = true, &ra, &dec
			a.Name = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(r.OName), "NAME "))
			if a.Name == "" {
				a.Name = name
			}
			a.ObjectType = strings.TrimSpace(r.OType)
			a.Resolver = BySesame
			a.Reference = strings.TrimSpace("Sesame " + strings.TrimSpace(r.Name) + " " + strings.TrimSpace(r.RefPos))
			for _, al := range r.Aliases {
				if al = strings.TrimSpace(al); al != "" && al != a.Name && len(a.Aliases) < 50 {
					a.Aliases = append(a.Aliases, al)
				}
			}
			return a, nil
		}
	}
	return a, nil
}
