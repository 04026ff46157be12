# r112 (1x H100): how long one staging or landing copy takes, as the proxy sees it (issue, record, poll the event):
# alone and warm; with a second process copying; after 200 us idle; the first of 4 queued at once
R=$OUT/r112; mkdir -p $R
var/copylat alone > $R/alone.txt 2>&1
( var/copylat procA > $R/pairA.txt 2>&1 & var/copylat procB > $R/pairB.txt 2>&1; wait )
var/copylat idle 200 > $R/idle.txt 2>&1
var/copylat burst 0 4 > $R/burst.txt 2>&1
var/copylat idle_burst 200 4 > $R/idle_burst.txt 2>&1
cat $R/alone.txt $R/pairA.txt $R/idle.txt $R/burst.txt $R/idle_burst.txt
