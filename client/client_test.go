package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/obsops/obsops/client"
	"github.com/obsops/obsops/client/api"
)

// TestRetriesHonourRetryAfterWithTheSameKey: a 503 with Retry-After and a 429 are retried after
// the wait, with the same Idempotency-Key, body and request id; the credential is sent as Bearer.
func TestRetriesHonourRetryAfterWithTheSameKey(t *testing.T) {
	var mu sync.Mutex
	var keys, ids, bodies, auths []string
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		b := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(b)
		keys, ids, bodies, auths = append(keys, r.Header.Get("Idempotency-Key")), append(ids, r.Header.Get("X-Request-ID")), append(bodies, string(b)), append(auths, r.Header.Get("Authorization"))
		times = append(times, time.Now())
		switch len(keys) {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"transaction_id":"0193a7c0-0000-7000-8000-000000000000","status":"buffered","count":1}`))
		}
	}))
	defer srv.Close()
	c, err := client.New(client.Options{BaseURL: srv.URL, Token: "ops_api_token_x"})
	if err != nil {
		t.Fatal(err)
	}
	key := client.NewIdempotencyKey()
	resp, err := c.API.RegisterRawDataFilesBulkWithResponse(context.Background(), &api.RegisterRawDataFilesBulkParams{IdempotencyKey: &key}, api.BulkFilesDoc{})
	if err := client.Check(resp.HTTPResponse, resp.Body, err); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d attempts, want 3", len(keys))
	}
	for i := range keys {
		if keys[i] != key || ids[i] != ids[0] || bodies[i] != bodies[0] || auths[i] != "Bearer ops_api_token_x" {
			t.Fatalf("attempt %d differs: key %q id %q body %q auth %q", i, keys[i], ids[i], bodies[i], auths[i])
		}
	}
	if d := times[1].Sub(times[0]); d < 900*time.Millisecond {
		t.Fatalf("Retry-After: 1 not honoured: %s", d)
	}
}

// TestProblemNamesTheField: a problem+json answer is a *client.Problem naming the field.
func TestProblemNamesTheField(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Request-ID", "req-1")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = w.Write([]byte(`{"title":"Unprocessable Entity","status":422,"detail":"validation failed","errors":[{"location":"body.files[3].checksum","message":"must be sha256:<64 hex>"}]}`))
	}))
	defer srv.Close()
	c, _ := client.New(client.Options{BaseURL: srv.URL})
	resp, err := c.API.GetMeWithResponse(context.Background())
	err = client.Check(resp.HTTPResponse, resp.Body, err)
	var p *client.Problem
	if !errors.As(err, &p) {
		t.Fatalf("%T %v", err, err)
	}
	if p.Status != 422 || p.Field != "body.files[3].checksum" || p.RequestID != "req-1" {
		t.Fatalf("%+v", p)
	}
	if want := "422 Unprocessable Entity: validation failed (body.files[3].checksum: must be sha256:<64 hex>)"; err.Error() != want {
		t.Fatalf("%q", err.Error())
	}
}

// TestUnreachable: no answer at all is *client.Unreachable, after retrying GETs.
func TestUnreachable(t *testing.T) {
	c, _ := client.New(client.Options{BaseURL: "http://127.0.0.1:1", MaxRetries: 1, MaxWait: time.Millisecond})
	resp, err := c.API.GetMeWithResponse(context.Background())
	var hr *http.Response
	var body []byte
	if resp != nil {
		hr, body = resp.HTTPResponse, resp.Body
	}
	var u *client.Unreachable
	if !errors.As(client.Check(hr, body, err), &u) {
		t.Fatalf("%v", err)
	}
}

// TestAllPages iterates over every page.
func TestAllPages(t *testing.T) {
	data := []int{1, 2, 3, 4, 5, 6, 7}
	var got []int
	for v, err := range client.All(context.Background(), 3, func(_ context.Context, limit, offset int64) (client.Page[int], error) {
		end := min(int(offset+limit), len(data))
		return client.Page[int]{Items: data[offset:end], Total: int64(len(data))}, nil
	}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if len(got) != 7 || got[6] != 7 {
		t.Fatalf("%v", got)
	}
}
