// Package digits loads the UCI digits (examples/data/digits.csv.gz) and splits them
// exactly like examples/c/digits.h (xorshift64* shuffle, the last fraction held out), so
// the Go examples train on the same split as the C ones.
package digits

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"strconv"
	"strings"
)

const (
	Features = 64
	Classes  = 10
)

// Set is n samples: X [n*64] scaled to [0,1], Y [n] labels.
type Set struct {
	X []float32
	Y []int64
	N int
}

// DefaultPath finds examples/data/digits.csv.gz from the repository root or bindings/go.
func DefaultPath() string {
	for _, p := range []string{"examples/data/digits.csv.gz", "../../examples/data/digits.csv.gz", "../../../examples/data/digits.csv.gz"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "examples/data/digits.csv.gz"
}

// Load reads the gzip'ed CSV: 64 pixels (0..16) then the label, one sample per line.
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Set{}
	sc := bufio.NewScanner(gz)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != Features+1 {
			return nil, fmt.Errorf("%s: line %d has %d fields", path, s.N+1, len(fields))
		}
		for j, fld := range fields {
			v, err := strconv.Atoi(strings.TrimSpace(fld))
			if err != nil {
				return nil, fmt.Errorf("%s: line %d is malformed", path, s.N+1)
			}
			if j < Features {
				s.X = append(s.X, float32(v)/16)
			} else {
				s.Y = append(s.Y, int64(v))
			}
		}
		s.N++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.N == 0 {
		return nil, fmt.Errorf("%s: no samples read", path)
	}
	return s, nil
}

// Split shuffles with xorshift64* (seed) and holds out the last testFraction, as digits_split.
func Split(all *Set, testFraction float64, seed uint64) (train, test *Set) {
	n := all.N
	nTest := int(float64(n)*testFraction + 0.5)
	nTrain := n - nTest
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	s := seed
	if s == 0 {
		s = 88172645463325252
	}
	for i := n - 1; i > 0; i-- {
		s ^= s >> 12
		s ^= s << 25
		s ^= s >> 27
		j := int((s * 2685821657736338717) % uint64(i+1))
		perm[i], perm[j] = perm[j], perm[i]
	}
	train = &Set{N: nTrain, X: make([]float32, 0, nTrain*Features), Y: make([]int64, 0, nTrain)}
	test = &Set{N: nTest, X: make([]float32, 0, nTest*Features), Y: make([]int64, 0, nTest)}
	for i, p := range perm {
		d := train
		if i >= nTrain {
			d = test
		}
		d.X = append(d.X, all.X[p*Features:(p+1)*Features]...)
		d.Y = append(d.Y, all.Y[p])
	}
	return train, test
}
