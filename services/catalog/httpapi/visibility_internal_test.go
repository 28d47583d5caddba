package httpapi

import (
	"encoding/json"
	"testing"
)

func TestHoursMatrixJSON(t *testing.T) {
	b, err := json.Marshal(hoursMatrix{{0, 24, 12.5, 3.14159, 0.05, 7.999, 0.004}, {}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != "[[0,24,12.5,3.14,0.05,8,0],[]]" {
		t.Fatal(string(b))
	}
}
