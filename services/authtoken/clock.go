package authtoken

import "time"

// Clock tells the time. The services read it instead of time.Now so that tests can move time
// forward instead of sleeping; its zero value (nil) is the real clock.
type Clock func() time.Time

// Now is the current time by c (time.Now when c is nil).
func (c Clock) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}
