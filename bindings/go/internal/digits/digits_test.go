package digits

import "testing"

func TestLoadSplit(t *testing.T) {
	all, err := Load("../../../../examples/data/digits.csv.gz")
	if err != nil {
		t.Fatal(err)
	}
	if all.N != 1797 || len(all.X) != 1797*64 || all.X[0] != 0 || all.Y[0] != 0 {
		t.Fatal(all.N, all.Y[0])
	}
	train, test := Split(all, 0.2, 42)
	if train.N != 1438 || test.N != 359 || len(train.X) != 1438*64 || len(test.Y) != 359 {
		t.Fatal(train.N, test.N)
	}
	a, _ := Split(all, 0.2, 42)
	for i := range a.Y {
		if a.Y[i] != train.Y[i] {
			t.Fatal("not deterministic")
		}
	}
}
