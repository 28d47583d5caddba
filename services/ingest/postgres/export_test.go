package postgres

// SetLookupLanes makes s share its file lookups in n lanes (TestBenchLookupLanes compares 1 and 2).
func SetLookupLanes(s *Store, n int) { s.lanes = n }
