package balancer

// deadlineHeap is a binary min-heap of held requests by leaveAt, each
// knowing its index (held.hindex), so Expire pops only what is due and a
// request that leaves otherwise is removed in O(log n).
type deadlineHeap []*held

func (q deadlineHeap) less(i, j int) bool { return q[i].leaveAt().Before(q[j].leaveAt()) }

func (q deadlineHeap) swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].hindex, q[j].hindex = i, j
}

func (q *deadlineHeap) push(h *held) {
	h.hindex = len(*q)
	*q = append(*q, h)
	q.up(h.hindex)
}

// remove takes h out of the heap.
func (q *deadlineHeap) remove(h *held) {
	i, last := h.hindex, len(*q)-1
	if i < 0 || i > last || (*q)[i] != h {
		return
	}
	if i != last {
		q.swap(i, last)
	}
	(*q)[last] = nil
	*q = (*q)[:last]
	h.hindex = -1
	if i < last {
		q.down(i)
		q.up(i)
	}
}

func (q deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q deadlineHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(q) {
			return
		}
		m := l
		if r := l + 1; r < len(q) && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}
