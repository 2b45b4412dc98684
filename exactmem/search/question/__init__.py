"""What is asked and what an answer is: shapes, outcomes, labelling classes (the lowest
layer of the search wing; imports no other part of it)."""
