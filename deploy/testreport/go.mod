module github.com/obsops/obsops/deploy/testreport

go 1.26.0
