"""The method: semantic backpropagation (`backward`), gradient descent on prompts (`descent`), the loop and its gate."""
